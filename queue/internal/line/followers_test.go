package line

import "testing"

// A turn that took followers sends one user message: the texts in order,
// a blank line between them, each with its sender when the senders differ.
func TestMergeText(t *testing.T) {
	same := []Follower{{SenderID: "ann", Text: "two"}, {SenderID: "ann", Text: "three"}}
	if got, want := MergeText("ann", "one", same), "one\n\ntwo\n\nthree"; got != want {
		t.Errorf("one sender: %q, want %q", got, want)
	}
	differ := []Follower{{SenderID: "bob", Text: "two"}, {Text: "three"}}
	if got, want := MergeText("ann", "one", differ), "ann: one\n\nbob: two\n\nthree"; got != want {
		t.Errorf("senders differ: %q, want %q", got, want)
	}
	if got := MergeText("ann", "one", nil); got != "one" {
		t.Errorf("no followers: %q", got)
	}
}
