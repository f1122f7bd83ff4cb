package app

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// urlSecrets are passwords with each character a URL reads as something
// else ('/', '?', '#' end the host; '%' starts an escape), as base64
// passwords often hold.
var urlSecrets = []string{"Zm9vQk/YmFyQk+cXV4==", "SeKrEtQ?HuNtEr2", "SeKrEtW#HuNtEr3", "SeKrEtE%zzHuNtEr4", "SeKrEtR%2HuNtEr5", "SeKrEtT%HuNtEr6", "SeKrEtY@HuNtEr7/x"}

// secretLeaks returns the parts of secret (split at the URL's special
// characters, 4 bytes or more) that out shows.
func secretLeaks(out, secret string) []string {
	var leaks []string
	for _, part := range regexp.MustCompile(`[/?#%@+=]`).Split(secret, -1) {
		if len(part) >= 4 && strings.Contains(out, part) {
			leaks = append(leaks, part)
		}
	}
	return leaks
}

// TestURLSettingsNeverShowPasswords: every URL-shaped setting of the worker
// and of enqueue (REDIS_URL, LETTA_BASE_URL, and a URL given where
// LETTAQ_REDIS_CLUSTER_ADDRS wants host:port; by variable and by flag) given
// a password holding '/', '?', '#', '@' or a stray '%' shows no part of it in
// anything printed (errors, logs, --help), and the configuration is
// refused with an error naming the variable.
func TestURLSettingsNeverShowPasswords(t *testing.T) {
	type run struct {
		name string
		f    func(env map[string]string, args []string) (int, string)
	}
	worker := run{"worker", func(env map[string]string, args []string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		env["LETTAQ_HTTP_ADDR"] = "off"
		code := RunWorker(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		return code, out.String() + errOut.String()
	}}
	enqueue := run{"enqueue", func(env map[string]string, args []string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		if len(args) == 0 || args[0] != "--help" {
			args = append(args, "--agent", "some-agent-name", "--ordering", "off", "--queue", "lettaq-unit-urlsecret", "hello")
		}
		code := RunEnqueue(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
		return code, out.String() + errOut.String()
	}}
	settings := []struct {
		name, flag, url string // url: SECRET stands for the password
	}{
		{"REDIS_URL", "redis-url", "redis://:SECRET@redis:6379/0"},
		{"REDIS_URL", "redis-url", "redis://default:SECRET@127.0.0.1:6379/0"},
		{"REDIS_URL", "redis-url", "rediss://user:SECRET@redis"},
		{"LETTA_BASE_URL", "letta-base-url", "http://user:SECRET@letta:8283"},
		{"LETTA_BASE_URL", "letta-base-url", "https://SECRET@api.letta.example"},
		{"LETTAQ_REDIS_CLUSTER_ADDRS", "redis-cluster-addrs", "redis://:SECRET@node1:6379,node2:6379"}, // a URL where seeds go
	}
	for _, r := range []run{worker, enqueue} {
		for _, s := range settings {
			for _, secret := range urlSecrets {
				raw := strings.ReplaceAll(s.url, "SECRET", secret)
				for _, how := range []string{"env", "flag", "help"} {
					env := map[string]string{}
					var args []string
					switch how {
					case "env":
						env[s.name] = raw
					case "flag":
						args = []string{"--" + s.flag + "=" + raw}
					case "help":
						env[s.name] = raw
						args = []string{"--help"}
					}
					code, out := r.f(env, args)
					if leaks := secretLeaks(out, secret); len(leaks) > 0 {
						t.Errorf("%s %s %s=%s: the output shows %q:\n%s", r.name, how, s.name, raw, leaks, out)
						continue
					}
					if how != "help" && (code != ExitUsage || !strings.Contains(out, s.name)) {
						t.Errorf("%s %s %s=%s: exit %d, want %d with an error naming %s:\n%s", r.name, how, s.name, raw, code, ExitUsage, s.name, out)
					}
				}
			}
		}
	}
}

// TestRedactURL: the user info (everything up to the last '@') never shows,
// whatever it holds, with or without a scheme.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@redis:6379/0":         "redis://xxx@redis:6379/0",
		"redis://u:a/b?c#d%e@redis:6379/0": "redis://xxx@redis:6379/0",
		"redis://u:a@b@redis":              "redis://xxx@redis",
		"//u:pw@redis":                     "//xxx@redis",
		"u:pw@redis":                       "xxx@redis",
		"redis://redis:6379/0":             "redis://redis:6379/0",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
