package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRelayConfigErrorsExit2NamingTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://x", "LETTAQ_RELAY_LEASE": "5"}, nil, "LETTAQ_RELAY_LEASE"},
		{map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://x"}, []string{"--relay-shards", "0"}, "--relay-shards (LETTAQ_RELAY_SHARDS)"},
		{map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://x", "LETTAQ_RELAY_KILL_AT": "nowhere"}, nil, "LETTAQ_RELAY_KILL_AT"},
		{map[string]string{}, nil, "LETTAQ_RELAY_FAKE_URL"},
		{map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://x", "LETTAQ_HTTP_ADDR": "0.0.0.0:8081"}, nil, "LETTAQ_HTTP_TOKEN"},
		{map[string]string{"LETTAQ_RELAY_WEB_AGENTS": "demo=not-an-agent"}, nil, "LETTAQ_RELAY_WEB_AGENTS"},
		{map[string]string{"LETTAQ_RELAY_WEB_AGENTS": "*", "LETTAQ_HTTP_ADDR": "off"}, nil, "LETTAQ_HTTP_ADDR is off"},
		{map[string]string{"LETTAQ_RELAY_WEB_AGENTS": "*", "LETTAQ_RELAY_WEB_JOURNAL_URL": "ftp://x/"}, nil, "LETTAQ_RELAY_WEB_JOURNAL_URL"},
		{map[string]string{"LETTAQ_RELAY_WEB_AGENTS": "*", "LETTAQ_STREAM_TOTAL": "soon"}, nil, "LETTAQ_STREAM_TOTAL"},
	} {
		var out, errOut bytes.Buffer
		code := RunRelay(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("env %v args %v: exit %d, stderr %q; want exit 2 naming %s", tc.env, tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestRelayHelpListsEveryVariable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := RunRelay(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, &errOut); code != ExitOK {
		t.Fatalf("--help exited %d", code)
	}
	for _, v := range RelayVars() {
		if !strings.Contains(out.String(), v.Name) || !strings.Contains(out.String(), "--"+v.Flag) {
			t.Errorf("--help does not list %s (--%s)", v.Name, v.Flag)
		}
	}
}
