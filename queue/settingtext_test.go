package queue

import (
	"strings"
	"testing"
)

// TestSettingsReadFromText: the policy, thread mode and filter read their
// names from text (any case and spacing for the first two; "" is the
// default) and reject others with an error naming the text and what is
// allowed.
func TestSettingsReadFromText(t *testing.T) {
	var p ApprovalPolicy
	for in, want := range map[string]ApprovalPolicy{"": ApprovalWait, " Deny ": ApprovalDeny, "error": ApprovalError} {
		if err := p.UnmarshalText([]byte(in)); err != nil || p != want {
			t.Errorf("policy %q: %q, %v; want %q", in, p, err, want)
		}
	}
	var m ThreadMode
	for in, want := range map[string]ThreadMode{"": ThreadConversation, "AGENT": ThreadAgent, "default": ThreadDefault} {
		if err := m.UnmarshalText([]byte(in)); err != nil || m != want {
			t.Errorf("thread mode %q: %q, %v; want %q", in, m, err, want)
		}
	}
	for _, bad := range []struct {
		err  error
		want string
	}{
		{p.UnmarshalText([]byte("later")), `"later": want wait, deny or error`},
		{m.UnmarshalText([]byte("chat")), `"chat" (want conversation, default or agent)`},
		{new(Filter).UnmarshalText([]byte("stall")), `"stall" (want all, stalls`},
	} {
		if bad.err == nil || !strings.Contains(bad.err.Error(), bad.want) {
			t.Errorf("error %v, want one containing %s", bad.err, bad.want)
		}
	}
}
