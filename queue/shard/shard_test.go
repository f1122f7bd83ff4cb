package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/internal/hashtag"
)

// The values the docs' worked example gives (docs/enqueue-from-other-languages.md):
// a producer in another language checks its own code against them.
func TestPinnedValues(t *testing.T) {
	if sum := sha256.Sum256([]byte("telegram:42")); binary.BigEndian.Uint32(sum[:4]) != 0x65d84554 {
		t.Errorf("SHA-256(telegram:42) begins %x, want 65d84554", sum[:4])
	}
	for _, c := range []struct {
		n                 int
		integration, chat string
		want              int
	}{
		{16, "telegram", "42", 4}, {4, "telegram", "42", 0}, {1, "telegram", "42", 0},
		{16, "web", "alice", 11}, {4, "web", "alice", 3},
		{16, "slack", "C024BE91L", 9}, {4, "slack", "C024BE91L", 1},
	} {
		if got := Of(c.n, c.integration, c.chat); got != c.want {
			t.Errorf("Of(%d, %q, %q) = %d, want %d", c.n, c.integration, c.chat, got, c.want)
		}
	}
	l16, err := New(16, "lettaq", "{lettaq}:")
	if err != nil {
		t.Fatal(err)
	}
	want16 := []string{"lettaq-0-28", "lettaq-1-23", "lettaq-2-249", "lettaq-3-10", "lettaq-4-109", "lettaq-5-40",
		"lettaq-6-9", "lettaq-7-64", "lettaq-8-164", "lettaq-9-8", "lettaq-10-49", "lettaq-11-42", "lettaq-12-102",
		"lettaq-13-67", "lettaq-14-8", "lettaq-15-21"}
	if got := l16.Queues(); !slices.Equal(got, want16) {
		t.Errorf("16 shards' queues = %q, want %q", got, want16)
	}
	if got, want := l16.Prefix(14), "lettaq:{lettaq-14-8}:"; got != want {
		t.Errorf("Prefix(14) = %q, want %q (the base prefix's braces dropped)", got, want)
	}
	l4, _ := New(4, "", "")
	if got, want := l4.Queues(), []string{"lettaq-0-3", "lettaq-1-31", "lettaq-2-3", "lettaq-3-22"}; !slices.Equal(got, want) {
		t.Errorf("4 shards' queues = %q, want %q", got, want)
	}
	if got, want := l4.TaskID(2, "turn:telegram:42:m1"), "turn:{lettaq-2-3}:telegram:42:m1"; got != want {
		t.Errorf("TaskID = %q, want %q", got, want)
	}
	if i, ok := l4.OfTask("turn:{lettaq-2-3}:telegram:42:m1"); !ok || i != 2 {
		t.Errorf("OfTask = %d, %v; want 2, true", i, ok)
	}
	if _, ok := l4.OfTask("turn:telegram:42:m1"); ok {
		t.Error("OfTask found a shard in a single-layout id")
	}
	// The worked example states these figures.
	doc, err := os.ReadFile("../../docs/enqueue-from-other-languages.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`65d84554`", "1708672340", "`lettaq-0-3`, `lettaq-1-31`,\n`lettaq-2-3`, `lettaq-3-22`",
		"1708672340 mod 4 = 0: queue `lettaq-0-3`", "`turn:{lettaq-0-3}:telegram:42:m1`", "1708672340 mod 16 = 4,\nqueue `lettaq-4-109`",
		"`turn:{lettaq-4-109}:telegram:42:m1`"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/enqueue-from-other-languages.md does not state %q", want)
		}
	}
	if got := l16.TaskID(4, "turn:telegram:42:m1"); got != "turn:{lettaq-4-109}:telegram:42:m1" {
		t.Errorf("16 shards' task id %q", got)
	}
}

// One shard is the single layout: the queue, the prefix and the ids as configured.
func TestOneShardIsTheSingleLayout(t *testing.T) {
	l, err := New(1, "q", "{p}:")
	if err != nil {
		t.Fatal(err)
	}
	if l.Queue(0) != "q" || l.Prefix(0) != "{p}:" || l.TaskID(0, "turn:a:b:c") != "turn:a:b:c" || l.Of("a", "b") != 0 {
		t.Errorf("one shard: queue %q, prefix %q, id %q", l.Queue(0), l.Prefix(0), l.TaskID(0, "turn:a:b:c"))
	}
	if i, ok := l.OfTask("turn:a:b:c"); !ok || i != 0 {
		t.Errorf("OfTask = %d, %v", i, ok)
	}
}

// Every shard's queue, prefix and task ids share its slot, inside its window;
// with 16 shards over 3 masters' equal ranges each master owns 33% ± 10% of them.
func TestShardsSpreadOverSlots(t *testing.T) {
	for _, n := range []int{2, 3, 16, 64, MaxShards} {
		l, err := New(n, "lettaq", "{lettaq}:")
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			q := l.Queue(i)
			slot := hashtag.Slot("asynq:{" + q + "}:pending")
			if lo, hi := Window(i, n); slot < lo || slot > hi {
				t.Errorf("n=%d shard %d: %s in slot %d, outside %d–%d", n, i, q, slot, lo, hi)
			}
			for _, key := range []string{l.Prefix(i) + "replies:web:x", l.Prefix(i) + "journal:turn:" + l.TaskID(i, "turn:web:x:1"),
				"lettaq:journal:turn:" + l.TaskID(i, "turn:web:x:1")} {
				if s := hashtag.Slot(key); s != slot {
					t.Errorf("n=%d shard %d: %s in slot %d, not its queue's %d", n, i, key, s, slot)
				}
			}
		}
	}
	l, _ := New(16, "lettaq", "")
	var perMaster [3]int
	for i := range 16 {
		perMaster[hashtag.Slot("{"+l.Queue(i)+"}")*3/hashtag.Slots]++
	}
	for m, c := range perMaster {
		if share := float64(c) / 16; share < 0.23 || share > 0.43 {
			t.Errorf("master %d owns %d of 16 shards (%.0f%%), not 33%% ± 10%%", m, c, 100*share)
		}
	}
}

// Chats spread evenly over the shards, sequential ids too (CRC16 mod 16 put 44 to 94 of
// 1,000 "chat-<n>" on each shard), and over the 3 masters of a cluster within 33% ± 10%.
func TestChatsSpreadOverShards(t *testing.T) {
	const n, chats = 16, 16000
	l, _ := New(n, "lettaq", "")
	for _, id := range []func(int) (string, string){
		func(c int) (string, string) { return "telegram", strconv.Itoa(100000 + c) },
		func(c int) (string, string) { return "test", "chat-" + strconv.Itoa(c) },
		func(c int) (string, string) { return "web", "user" + strconv.Itoa(c) },
	} {
		var per [n]int
		var perMaster [3]int
		for c := range chats {
			sh := l.Of(id(c))
			per[sh]++
			perMaster[hashtag.Slot("{"+l.Queue(sh)+"}")*3/hashtag.Slots]++
		}
		in, chat := id(0)
		for i, c := range per {
			if c < chats/n*85/100 || c > chats/n*115/100 {
				t.Errorf("%s:%s…: shard %d has %d of %d chats, more than 15%% off the mean", in, chat, i, c, chats)
			}
		}
		for m, c := range perMaster {
			if share := float64(c) / chats; share < 0.23 || share > 0.43 {
				t.Errorf("%s:%s…: master %d has %.0f%% of the chats, not 33%% ± 10%%", in, chat, m, 100*share)
			}
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		n     int
		queue string
	}{{0, "q"}, {-1, "q"}, {MaxShards + 1, "q"}, {2, "a{b}"}, {2, "a:b"}} {
		if _, err := New(c.n, c.queue, ""); err == nil {
			t.Errorf("New(%d, %q) accepted", c.n, c.queue)
		}
	}
	if _, err := New(1, "a:b", ""); err != nil {
		t.Errorf("one shard refused a queue it took before: %v", err)
	}
}
