package testredis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStartCluster: the cluster answers on every slot, through any seed.
func TestStartCluster(t *testing.T) {
	t0 := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3-node cluster %v ready in %v", c.Addrs, time.Since(t0).Round(time.Millisecond))
	rc := c.Client(t)
	ctx := context.Background()
	masters := map[string]bool{}
	for i := range 50 {
		k := fmt.Sprintf("k%d", i)
		if err := rc.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		n, err := rc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("50 keys landed on %d masters, want 3", len(masters))
	}
	// A multi-key command across slots is refused: this is a real cluster.
	if err := rc.Do(ctx, "MGET", "k1", "k2", "k3").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MGET across slots: err = %v, want CROSSSLOT", err)
	}
}
