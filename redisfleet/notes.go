package redisfleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	si "github.com/self-improving-loop/selfimprove"
	"github.com/self-improving-loop/selfimprove/failure"
)

// The fleet's notes (selfimprove.Fleet.Note): one hash, <prefix>notes,
// whose field is <length of kind>:<kind><name> and whose value is
// "<until, Unix ms> <reason>". The scripts keep it to
// selfimprove.MaxFleetNotes fields (beyond, the note that ends first of
// the kind with the most notes goes: see selfimprove.Fleet.Note) and values of at most maxNoteValue
// bytes; a hash found larger than twice that (not written by them) is
// dropped whole, so that reading it stays bounded.

// maxNoteValue bounds a note's stored value: the until, a space and a
// reason of at most 512 bytes.
const maxNoteValue = 20 + 1 + 512

// noteScript records or ends one note: KEYS notes; ARGV field, until ms,
// now ms, reason, cap. It returns 1 when a note of the field was in force
// at now.
var noteScript = redis.NewScript(`
local h, f = KEYS[1], ARGV[1]
local untilMs, now, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if redis.call('HLEN', h) > 2 * cap then redis.call('DEL', h) end
local function untilOf(v)
  if not v or #v > ` + strconv.Itoa(maxNoteValue) + ` then return nil end
  return tonumber(string.match(v, '^(%d+) '))
end
local oldUntil = untilOf(redis.call('HGET', h, f))
local was = 0
if oldUntil and oldUntil > now then was = 1 end
if untilMs <= now then
  redis.call('HDEL', h, f)
  return was
end
if was == 1 and untilMs <= oldUntil then return was end
redis.call('HSET', h, f, ARGV[2] .. ' ' .. ARGV[4])
if redis.call('HLEN', h) > cap then
  local all = redis.call('HGETALL', h)
  local keep, count = {}, {}
  for i = 1, #all, 2 do
    local u = untilOf(all[i + 1])
    if not u or u <= now then
      redis.call('HDEL', h, all[i])
    else
      local c = string.find(all[i], ':', 1, true) or 1
      local k = string.sub(all[i], 1, c + (tonumber(string.sub(all[i], 1, c - 1)) or 0))
      keep[#keep + 1] = {all[i], u, k}
      count[k] = (count[k] or 0) + 1
    end
  end
  table.sort(keep, function(a, b) return a[2] < b[2] end)
  for _ = 1, #keep - cap do
    local most = 0
    for _, c in pairs(count) do if c > most then most = c end end
    for i = 1, #keep do
      local e = keep[i]
      if e[2] and count[e[3]] == most then
        redis.call('HDEL', h, e[1])
        count[e[3]] = most - 1
        e[2] = nil
        break
      end
    end
  end
end
return was
`)

// notesScript returns the notes of one kind in force: KEYS notes; ARGV
// field prefix, now ms, cap. It returns field, value pairs.
var notesScript = redis.NewScript(`
local h, p, now, cap = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('HLEN', h) > 2 * cap then return {} end
local all = redis.call('HGETALL', h)
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  if string.sub(all[i], 1, #p) == p and #v <= ` + strconv.Itoa(maxNoteValue) + ` then
    local u = tonumber(string.match(v, '^(%d+) '))
    if u and u > now then
      out[#out + 1] = all[i]
      out[#out + 1] = v
    end
  end
end
return out
`)

// noteField returns the hash field of a note: kind and name apart,
// whatever bytes they hold.
func noteField(kind, name string) string { return strconv.Itoa(len(kind)) + ":" + kind + name }

func (f *Fleet) notesKey() string { return f.opts.Prefix + "notes" }

// Note records a note for every replica (see selfimprove.Fleet).
func (f *Fleet) Note(ctx context.Context, kind, name, reason string, until, now time.Time) (bool, error) {
	if len(kind) == 0 || len(kind) > 16 || len(name) > si.MaxFleetNotes {
		return false, fmt.Errorf("redisfleet: note: kind of %d bytes, name of %d: want 1 to 16 and at most %d", len(kind), len(name), si.MaxFleetNotes)
	}
	u := until.UnixMilli()
	if !until.After(now) {
		u = 0
	}
	var n int64
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = noteScript.Run(ctx, f.c, []string{f.notesKey()}, noteField(kind, name), u, now.UnixMilli(),
			failure.Bound(reason, 512), si.MaxFleetNotes).Int64()
		return err
	})
	if err != nil {
		return false, fail("note", err)
	}
	return n == 1, nil
}

// Notes returns the notes of kind in force at now, by name.
func (f *Fleet) Notes(ctx context.Context, kind string, now time.Time) ([]si.DeadRoute, error) {
	p := noteField(kind, "")
	var vals []string
	err := f.do(ctx, func(ctx context.Context) error {
		var err error
		vals, err = notesScript.Run(ctx, f.c, []string{f.notesKey()}, p, now.UnixMilli(), si.MaxFleetNotes).StringSlice()
		return err
	})
	if err != nil {
		return nil, fail("notes", err)
	}
	var out []si.DeadRoute
	for i := 0; i+1 < len(vals) && len(out) < si.MaxFleetNotes; i += 2 {
		ms, reason, _ := strings.Cut(vals[i+1], " ")
		u, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || len(reason) > 512 {
			continue
		}
		out = append(out, si.DeadRoute{Route: strings.TrimPrefix(vals[i], p), Until: time.UnixMilli(u).UTC(), Reason: strings.ToValidUTF8(reason, "")})
	}
	slices.SortFunc(out, func(a, b si.DeadRoute) int { return strings.Compare(a.Route, b.Route) })
	return out, nil
}
