package redisfleet_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	si "github.com/self-improving-loop/selfimprove"
)

// checkReplaced checks that the next decision replaces each bad state of
// ids, on every replica.
func checkReplaced(t *testing.T, ls []*si.Loop, ids []string) {
	t.Helper()
	for _, id := range ids {
		var err error
		for try := 0; try < 3; try++ {
			if err = ls[try%2].SetConfig(id, si.Config{Route: "fixed"}); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("agent %q: SetConfig fails 3 times: %v", id, err)
			continue
		}
		v := ls[0].Config(id).Version
		if v2 := ls[1].Config(id); v2.Route != "fixed" && !waitFor(2*time.Second, func() bool { return ls[1].Config(id).Route == "fixed" && ls[0].Config(id).Route == "fixed" }) {
			t.Errorf("agent %q: replica 0 runs version %d, replica 1 %+v", id, v, ls[1].Config(id))
		}
	}
}

// plantHostile plants, under prefix, the hostile values of
// TestHostileKeys.
func plantHostile(t *testing.T, admin *redis.Client, prefix string) {
	key := func(id, part string) string { return agentKey(prefix, id, part) }
	bump := `redis.call('HINCRBY', KEYS[1], 'rev', 1) `
	plant(t, admin, bump+`redis.call('HSET', KEYS[1], 'val', string.rep('x', 100 * 1024 * 1024), 'len', '10')`, key("big", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'rev', '4611686018427387904')`, key("rev62", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'rev', '18446744073709551615')`, key("revmax", "s"))
	plant(t, admin, bump+`redis.call('HSET', KEYS[1], 'val', '{not json')`, key("json", "s"))
	plant(t, admin, `redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], 'x')`, key("type", "s"))
	plant(t, admin, `redis.call('HSET', KEYS[1], 'tl', '-9000000000000000000', 'tc', '5')`, key("neg", "n"))
	plant(t, admin, `redis.call('RPUSH', KEYS[1], 'x', '1 {not json', '2 {"gen":1,"text":"`+
		`'..string.rep('y', 10000)..'"}', '3 {"gen":1,"duration_ns":-5,"end_ns":-1,"class":"bogus","text":"z"}')`, key("fails", "f"))
}
