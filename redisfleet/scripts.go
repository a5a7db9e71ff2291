package redisfleet

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each runs on one agent's keys (one hash slot) and
// checks what it reads before it uses or returns it: the key's type, the
// length of a value (HSTRLEN, STRLEN, LLEN) before the value, and the
// range of every number. A key that fails the checks is set aside
// (renamed to <key>-bad, kept a day for inspection) by the script that
// writes it next, so that a bad key costs one report, not a failure of
// every call. No script writes before the step that can fail on the
// user's rights (PUBLISH): a Lua error leaves nothing behind.

// maxRev bounds revisions: 2^53, exact in Lua's numbers.
const maxRev = 1 << 53

// luaLib are the functions the scripts share.
var luaLib = `
local MAXREV = ` + strconv.FormatInt(maxRev, 10) + `
local function revOf(raw)
  if raw == false then return 0 end
  if #raw > 16 or not string.match(raw, '^[1-9]%d*$') then return nil end
  local n = tonumber(raw)
  if n >= MAXREV then return nil end
  return n
end
local function typeOf(k) return redis.call('TYPE', k)['ok'] end
-- stateOf returns the revision of the state hash k: 0 without one, nil
-- when it is not a valid state of at most maxval bytes.
local function stateOf(k, maxval)
  local t = typeOf(k)
  if t == 'none' then return 0 end
  if t ~= 'hash' or redis.call('HSTRLEN', k, 'rev') > 16 or redis.call('HSTRLEN', k, 'val') > maxval
    or redis.call('HSTRLEN', k, 'id') > ` + strconv.Itoa(maxAgentID) + ` then return nil end
  local r = revOf(redis.call('HGET', k, 'rev'))
  if r == 0 then return nil end
  return r
end
local function setAside(k, bad)
  if typeOf(k) ~= 'none' then
    redis.call('RENAME', k, bad)
    redis.call('PEXPIRE', bad, 86400000)
  end
end
`

// loadScript is Load: KEYS s; ARGV agent ID, max value. It returns
// {rev, value}, {"0"} without a state, or {"bad", why}.
var loadScript = redis.NewScript(luaLib + `
local r = stateOf(KEYS[1], tonumber(ARGV[2]))
if r == nil then return {'bad', 'not a valid state (type, size or revision)'} end
if r == 0 then return {'0'} end
local v = redis.call('HMGET', KEYS[1], 'rev', 'val', 'id')
if v[3] ~= ARGV[1] then return {'bad', 'the state of another agent'} end
return {v[1], v[2] or ''}
`)

// commitScript is Commit: KEYS s, s-bad; ARGV rev, value, agent ID,
// channel, deadline (server time in µs, 0: none), max value.
//
// An agent's first revision is the server's time in microseconds, so
// that after Redis lost its data (a restart without persistence) a new
// state never takes a revision a replica already knows for an older one.
// A state that is not valid counts as none: a commit on revision 0
// replaces it (and sets it aside). Past the deadline the script returns
// 0 and writes nothing: a commit its replica gave up on never lands. It
// publishes before it writes: a user without the right to publish gets
// an error and nothing is written.
var commitScript = redis.NewScript(luaLib + `
local cur = stateOf(KEYS[1], tonumber(ARGV[6]))
local bad = cur == nil
if bad then cur = 0 end
if cur ~= tonumber(ARGV[1]) then return -cur - 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local dl = tonumber(ARGV[5])
if dl > 0 and now > dl then return 0 end
local nrev = cur + 1
if cur == 0 then nrev = now end
local s = string.format('%.0f', nrev)
redis.call('PUBLISH', ARGV[4], s .. ':' .. ARGV[3])
if bad then setAside(KEYS[1], KEYS[2]) end
redis.call('HSET', KEYS[1], 'rev', s, 'val', ARGV[2], 'id', ARGV[3], 'len', string.len(ARGV[2]))
return nrev
`)

// countFields are the integer fields of the counts hash n: the
// generation, the failure sequence, and calls, failures, latency, success
// latency, consecutive failures, scores (n), calls with a cost (x) and
// successful ones among them (y) for the change (c), the control (k) and
// all generations (t). sumFields are its float fields: the scores' sum
// (s), their squares' (q) and the cost (z).
var countFields = `{'gen', 'seq', 'cc', 'cf', 'cl', 'co', 'ck', 'cn', 'cx', 'cy', 'kc', 'kf', 'kl', 'ko', 'kk', 'kn', 'kx', 'ky',
  'tc', 'tf', 'tl', 'to', 'tk', 'tn', 'tx', 'ty'}`
var sumFields = `{'cs', 'cq', 'cz', 'ks', 'kq', 'kz', 'ts', 'tq', 'tz'}`

// addScript adds one delta: KEYS n, f, s, b, n-bad, f-bad, t; ARGV gen,
// change (5), control (5), ttl ms, failure count, failures..., cap,
// replica, batch, max value, change's scores and costs (6), control's
// (6), statistics ("": none), agent ID.
//
// It first checks the counts (n: a hash of at most 64 fields, each of our
// integer fields from 0 to 4e18, failures at most calls, success
// latency at most latency, the run at most the failures; each float
// field a number from 0 to 1e300, the scores' sum at most their count
// and their squares' at most their sum, with room for rounding; calls
// with a cost and a success at most those with a cost) and the
// failures (f: a list of at most twice the cap, each "<seq> {...}" of at
// most 4 KiB), and sets aside what fails. A batch (replica, number) the
// fleet has booked (b: each replica's latest batch) is not booked again:
// a delta sent again after its answer was lost counts once. It returns
// {rev or "bad", same generation, counts (33: the 5 counts and 6 scores
// and costs of the change, the control and the total), failures, server
// time {s, µs}, what was set aside}. The statistics of a delta it books
// replace the agent's (t: a hash {val, id}, whatever was there before);
// they expire with the counts.
var addScript = redis.NewScript(luaLib + `
local n, fl, b = KEYS[1], KEYS[2], KEYS[4]
local F, FS = ` + countFields + `, ` + sumFields + `
local aside = ''
local function countsOK()
  local t = typeOf(n)
  if t == 'none' then return true end
  if t ~= 'hash' or redis.call('HLEN', n) > 64 then return false end
  for _, f in ipairs(F) do
    if redis.call('HSTRLEN', n, f) > 19 then return false end
  end
  for _, f in ipairs(FS) do
    if redis.call('HSTRLEN', n, f) > 32 then return false end
  end
  local v = redis.call('HMGET', n, unpack(F))
  local x = {}
  for i, s in ipairs(v) do
    if s then
      if not string.match(s, '^%d+$') then return false end
      local num = tonumber(s)
      if num > 4e18 then return false end
      x[F[i]] = num
    else
      x[F[i]] = 0
    end
  end
  for i, s in ipairs(redis.call('HMGET', n, unpack(FS))) do
    local num = 0
    if s then num = tonumber(s) end
    if num == nil or not (num >= 0 and num <= 1e300) then return false end
    x[FS[i]] = num
  end
  if x['gen'] >= MAXREV then return false end
  for _, p in ipairs({'c', 'k', 't'}) do
    if x[p..'f'] > x[p..'c'] or x[p..'o'] > x[p..'l'] or x[p..'k'] > x[p..'f'] then return false end
    if x[p..'s'] > x[p..'n'] * (1 + 1e-9) + 1e-9 or x[p..'q'] > x[p..'s'] * (1 + 1e-9) + 1e-9 or x[p..'y'] > x[p..'x'] then return false end
  end
  return true
end
local function failsOK()
  local t = typeOf(fl)
  if t == 'none' then return true end
  local cap = tonumber(ARGV[14 + tonumber(ARGV[13])])
  if t ~= 'list' or redis.call('LLEN', fl) > 2 * cap then return false end
  for _, e in ipairs(redis.call('LRANGE', fl, 0, -1)) do
    if #e > 4096 or not string.match(e, '^%d+ {') then return false end
  end
  return true
end
if not countsOK() then setAside(n, KEYS[5]) aside = aside .. 'counts ' end
if not failsOK() then setAside(fl, KEYS[6]) aside = aside .. 'failures ' end
local nf = tonumber(ARGV[13])
local replica, batch = ARGV[15 + nf], ARGV[16 + nf]
local dup = false
if batch ~= '0' then
  local t = typeOf(b)
  if t ~= 'none' and (t ~= 'hash' or redis.call('HLEN', b) > 4096) then redis.call('DEL', b) end
  local last = false
  if redis.call('HSTRLEN', b, replica) <= 19 then last = redis.call('HGET', b, replica) end
  if last and tonumber(last) and tonumber(last) >= tonumber(batch) then
    dup = true
  else
    redis.call('HSET', b, replica, batch)
    redis.call('PEXPIRE', b, ARGV[12])
  end
end
local gen = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', n, 'gen') or '0')
local function addSum(f, a)
  local v = tonumber(redis.call('HGET', n, f) or '0') + tonumber(a)
  redis.call('HSET', n, f, string.format('%.17g', v))
end
local function add(p, i, j)
  local calls, fails = tonumber(ARGV[i]), tonumber(ARGV[i+1])
  redis.call('HINCRBY', n, p..'c', calls)
  redis.call('HINCRBY', n, p..'f', fails)
  redis.call('HINCRBY', n, p..'l', ARGV[i+2])
  redis.call('HINCRBY', n, p..'o', ARGV[i+3])
  if calls > fails then
    redis.call('HSET', n, p..'k', ARGV[i+4])
  else
    redis.call('HINCRBY', n, p..'k', fails)
  end
  if ARGV[j] ~= '0' then
    redis.call('HINCRBY', n, p..'n', ARGV[j])
    addSum(p..'s', ARGV[j+1])
    addSum(p..'q', ARGV[j+2])
  end
  if ARGV[j+3] ~= '0' then
    redis.call('HINCRBY', n, p..'x', ARGV[j+3])
    redis.call('HINCRBY', n, p..'y', ARGV[j+4])
    addSum(p..'z', ARGV[j+5])
  end
end
local q = 18 + nf
if not dup then
  if gen > cur then
    redis.call('HDEL', n, 'cc', 'cf', 'cl', 'co', 'ck', 'cn', 'cs', 'cq', 'cx', 'cy', 'cz',
      'kc', 'kf', 'kl', 'ko', 'kk', 'kn', 'ks', 'kq', 'kx', 'ky', 'kz')
    redis.call('HSET', n, 'gen', gen)
    cur = gen
  end
  add('t', 2, q)
  add('t', 7, q + 6)
  if gen == cur then
    add('c', 2, q)
    add('k', 7, q + 6)
  end
  for i = 1, nf do
    local seq = redis.call('HINCRBY', n, 'seq', 1)
    redis.call('RPUSH', fl, seq .. ' ' .. ARGV[13 + i])
  end
  redis.call('LTRIM', fl, -tonumber(ARGV[14 + nf]), -1)
  if ARGV[q + 12] ~= '' then
    redis.call('DEL', KEYS[7])
    redis.call('HSET', KEYS[7], 'val', ARGV[q + 12], 'id', ARGV[q + 13])
    redis.call('PEXPIRE', KEYS[7], ARGV[12])
  end
end
redis.call('PEXPIRE', n, ARGV[12])
redis.call('PEXPIRE', fl, ARGV[12])
redis.call('PEXPIRE', KEYS[7], ARGV[12])
local same = 0
if gen == cur then same = 1 end
local rev = stateOf(KEYS[3], tonumber(ARGV[17 + nf]))
local revS = 'bad'
if rev == 0 then revS = '0' elseif rev then revS = redis.call('HGET', KEYS[3], 'rev') end
return {revS, same,
  redis.call('HMGET', n, 'cc', 'cf', 'cl', 'co', 'ck', 'cn', 'cs', 'cq', 'cx', 'cy', 'cz', 'kc', 'kf', 'kl', 'ko', 'kk',
    'kn', 'ks', 'kq', 'kx', 'ky', 'kz', 'tc', 'tf', 'tl', 'to', 'tk', 'tn', 'ts', 'tq', 'tx', 'ty', 'tz'),
  redis.call('LRANGE', fl, 0, -1), redis.call('TIME'), aside}
`)

// statsScript is LoadStats: KEYS t, t-bad; ARGV agent ID, max value. It
// returns {"1", value}, {"0"} without statistics, or {"bad", why} after
// it set a value that is not valid statistics aside, unread.
var statsScript = redis.NewScript(luaLib + `
local t = typeOf(KEYS[1])
if t == 'none' then return {'0'} end
if t ~= 'hash' or redis.call('HLEN', KEYS[1]) > 2 or redis.call('HSTRLEN', KEYS[1], 'val') > tonumber(ARGV[2])
  or redis.call('HSTRLEN', KEYS[1], 'id') > ` + strconv.Itoa(maxAgentID) + ` then
  setAside(KEYS[1], KEYS[2])
  return {'bad', 'not valid statistics (type or size); set aside'}
end
local v = redis.call('HMGET', KEYS[1], 'val', 'id')
if v[2] ~= ARGV[1] or not v[1] then
  setAside(KEYS[1], KEYS[2])
  return {'bad', 'the statistics of another agent; set aside'}
end
return {'1', v[1]}
`)

// leaseScript is Lease: KEYS l; ARGV owner, ttl ms. A lease key that is
// not a short string is dropped.
var leaseScript = redis.NewScript(luaLib + `
local t = typeOf(KEYS[1])
if t ~= 'none' and (t ~= 'string' or redis.call('STRLEN', KEYS[1]) > 128) then redis.call('DEL', KEYS[1]) end
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// releaseScript is Release: KEYS l; ARGV owner.
var releaseScript = redis.NewScript(luaLib + `
if typeOf(KEYS[1]) == 'string' and redis.call('STRLEN', KEYS[1]) <= 128 and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0
`)

// eventsScript is Events: KEYS events; ARGV limit, max bytes. It returns
// the values of the latest events, newest first, leaving out those larger
// than max bytes and entries of another shape.
var eventsScript = redis.NewScript(luaLib + `
if typeOf(KEYS[1]) ~= 'stream' then return {} end
local out = {}
for _, m in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])) do
  local f = m[2]
  if #f == 2 and f[1] == 'e' and #f[2] <= tonumber(ARGV[2]) then out[#out + 1] = f[2] end
end
return out
`)

// checkScript runs once each command a replica's scripts use, on keys of
// the prefix (<prefix>{check}:...), and publishes on the fleet's channel:
// KEYS hash, list, string, hash-renamed; ARGV channel.
var checkScript = redis.NewScript(`
redis.call('PUBLISH', ARGV[1], 'check')
redis.call('TYPE', KEYS[1])
redis.call('HSET', KEYS[1], 'a', '1')
redis.call('HINCRBY', KEYS[1], 'b', 1)
redis.call('HMGET', KEYS[1], 'a', 'b')
redis.call('HGET', KEYS[1], 'a')
redis.call('HSTRLEN', KEYS[1], 'a')
redis.call('HLEN', KEYS[1])
redis.call('HDEL', KEYS[1], 'a')
redis.call('HGETALL', KEYS[1])
redis.call('RENAME', KEYS[1], KEYS[4])
redis.call('PEXPIRE', KEYS[4], 1000)
redis.call('RPUSH', KEYS[2], 'x')
redis.call('LTRIM', KEYS[2], -1, -1)
redis.call('LLEN', KEYS[2])
redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('SET', KEYS[3], 'x', 'PX', 1000)
redis.call('GET', KEYS[3])
redis.call('STRLEN', KEYS[3])
redis.call('TIME')
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
`)
