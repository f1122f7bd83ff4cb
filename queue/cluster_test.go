package queue

import (
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

// A library user who builds a worker on Redis Cluster with the default prefix gets an error at
// once, not a worker whose every turn fails with CROSSSLOT.
func TestNewWorkerRefusesUntaggedPrefixOnCluster(t *testing.T) {
	cluster := asynq.RedisClusterClientOpt{Addrs: []string{"127.0.0.1:1"}}
	cases := []struct {
		name    string
		conn    asynq.RedisConnOpt
		replies string
		journal string
		want    string // "" = no prefix error
	}{
		{"cluster, default prefixes", cluster, "", "", `reply key prefix "lettaq:"`},
		{"cluster, journal untagged", cluster, "{lettaq}:", "lettaq:", `journal key prefix "lettaq:"`},
		{"cluster, pointer option", &cluster, "x:", "{x}:", `reply key prefix "x:"`},
		{"cluster, empty tag", cluster, "{}lettaq:", "{lettaq}:", `reply key prefix "{}lettaq:"`},
		{"cluster, tagged", cluster, "{lettaq}:", "{lettaq}:", ""},
		{"single node, untagged", asynq.RedisClientOpt{Addr: "127.0.0.1:1"}, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkClusterPrefix(c.conn, "reply", c.replies)
			if err == nil {
				err = checkClusterPrefix(c.conn, "journal", c.journal)
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "CROSSSLOT")):
				t.Fatalf("error %v, want one naming %s and CROSSSLOT", err, c.want)
			}
		})
	}
	// And NewWorker itself refuses, before it touches Redis.
	_, err := NewWorker(WorkerConfig{Redis: cluster, Letta: LettaConnection{URL: "http://127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("NewWorker on a cluster with the default prefix: %v", err)
	}
}

func TestOrderingPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"": "lettaq:ord:", "lettaq:": "lettaq:ord:", "{lettaq}:": "lettaq:ord:", "{app}:x:": "app:x:ord:", "myapp:": "myapp:ord:",
	} {
		if got := OrderingPrefix(in); got != want {
			t.Errorf("OrderingPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
