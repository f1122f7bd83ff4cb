package store

import (
	"path"
	"testing"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// TestStreamsInShards: with the workers' shards the relay reads a chat from
// its stream under any shard's prefix, and its SCAN pattern matches them;
// with one shard, the streams under the prefix alone.
func TestStreamsInShards(t *testing.T) {
	l, err := shard.New(4, "lettaq", "lettaq:")
	if err != nil {
		t.Fatal(err)
	}
	c := record.Conversation{Integration: "tg", ChatID: "42:x"}
	for _, tc := range []struct {
		layout shard.Layout
		key    string
	}{
		{shard.Layout{}, "lettaq:replies:tg:42:x"},
		{l, queue.NewReplies(nil, queue.RepliesOptions{Shards: l}).Key(c)},
	} {
		s := New(nil, "lettaq:", 0).WithShards(tc.layout)
		if got, ok := s.ChatOfStream(tc.key); !ok || got != c {
			t.Errorf("%s: chat %v %v", tc.key, got, ok)
		}
		// (Redis's glob and path.Match agree on these patterns: no escapes but '-'.)
		pat := s.RepliesPattern()
		if ok, _ := path.Match(unescapeDash(pat), tc.key); !ok {
			t.Errorf("pattern %q does not match %s", pat, tc.key)
		}
		if _, ok := s.ChatOfStream("lettaq:relay:chat:tg:42"); ok {
			t.Errorf("a relay key read as a stream")
		}
	}
}

func unescapeDash(p string) string {
	out := []byte{}
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			i++
		}
		out = append(out, p[i])
	}
	return string(out)
}
