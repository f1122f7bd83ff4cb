package rediscluster

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestSlotHalfMoved: what a client meets while a slot is half moved, as
// Redis 7 answers and go-redis handles it. A command on one key goes
// through wherever the key is (go-redis follows ASK); a script or MULTI
// whose keys are split between source and target is refused whole with
// TRYAGAIN (go-redis repeats it a few times, then returns it); a script
// that reaches a key it did not declare fails at that call with the writes
// before it kept. Once the slot is moved, all goes through again.
func TestSlotHalfMoved(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	rc := c.Client(t)
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := ms[0].Slots[0][0] + 3
	tag := TagForSlot(slot)
	k := func(s string) string { return tag + s }
	for _, s := range []string{"a", "b"} {
		if err := rc.Set(ctx, k(s), 0, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.StartMigration(ctx, slot, ms[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Move(ctx, k("b")); err != nil { // a on the source, b on the target
		t.Fatal(err)
	}
	get := func(key string) string {
		t.Helper()
		v, err := rc.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}

	// One key a command: through, wherever the key is.
	if err := rc.Incr(ctx, k("b")).Err(); err != nil {
		t.Errorf("INCR of the moved key: %v", err)
	}
	if err := rc.Set(ctx, k("new"), 1, 0).Err(); err != nil {
		t.Errorf("SET of a new key: %v", err)
	}
	dst := node(ms[1].Addr)
	defer dst.Close()
	if n, err := dst.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 2 {
		t.Errorf("the target holds %d keys of the slot (%v), want 2 (the moved one, the new one)", n, err)
	}

	// Declared keys split: refused whole.
	both := redis.NewScript(`redis.call("INCR", KEYS[1]) return redis.call("INCR", KEYS[2])`)
	if err := both.Run(ctx, rc, []string{k("a"), k("b")}).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Errorf("script on split keys: %v, want TRYAGAIN", err)
	}
	if _, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, k("a"))
		p.Incr(ctx, k("b"))
		return nil
	}); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Errorf("MULTI on split keys: %v, want TRYAGAIN", err)
	}
	if a, b := get(k("a")), get(k("b")); a != "0" || b != "1" {
		t.Errorf("after the refused script and MULTI: a=%s b=%s, want 0 and 1 (nothing applied)", a, b)
	}

	// An undeclared key the source no longer has: the script stops there,
	// the INCR before it stays.
	undeclared := redis.NewScript(`redis.call("INCR", KEYS[1]) return redis.call("INCR", ARGV[1])`)
	err = undeclared.Run(ctx, rc, []string{k("a")}, k("b")).Err()
	if err == nil || !strings.Contains(err.Error(), "non local key") {
		t.Errorf("script reaching an undeclared moved key: %v, want \"non local key\"", err)
	}
	if a, b := get(k("a")), get(k("b")); a != "1" || b != "1" {
		t.Errorf("after the script that failed half-way: a=%s b=%s, want 1 (its first INCR kept) and 1", a, b)
	}

	if err := m.Finish(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := both.Run(ctx, rc, []string{k("a"), k("b")}).Err(); err != nil {
		t.Errorf("script once the slot moved: %v", err)
	}
	if a, b, n := get(k("a")), get(k("b")), get(k("new")); a != "2" || b != "2" || n != "1" {
		t.Errorf("after the move: a=%s b=%s new=%s, want 2, 2, 1", a, b, n)
	}
	t.Logf("slot %d moved from %s to %s", slot, m.Source().Addr, m.Target().Addr)
}
