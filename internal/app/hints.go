package app

import (
	"os"
	"path/filepath"
	"strings"
)

// Hints: a command enqueue prints for the operator to run next must run as printed. It
// names the command as it was invoked and repeats every setting that decides which Redis and
// keys it reaches (--dev, --dev-redis-addr, --redis-url, --redis-cluster-addrs,
// --key-prefix) when not the default, whether it came from a flag or the environment.

// enqueueCommand is how hints name the enqueue command: "go run ./cmd/enqueue" under go run
// (and in tests), the path as invoked when it has one (./enqueue), else the bare name (on
// PATH).
var enqueueCommand = func() string {
	a := os.Args[0]
	if strings.Contains(filepath.ToSlash(a), "/go-build") {
		return "go run ./cmd/enqueue"
	}
	if a == "" {
		return "enqueue"
	}
	return shQuote(a)
}()

// hint returns the command line that runs enqueue with o's connection settings and args.
func (o *enqueueOpts) hint(args ...string) string {
	return o.commandLine(enqueueCommand, args...)
}

// commandLine is hint with the command named cmd.
func (o *enqueueOpts) commandLine(cmd string, args ...string) string {
	parts := []string{cmd}
	flag := func(name, val string) { parts = append(parts, "--"+name+"="+shQuote(val)) }
	if o.dev {
		parts = append(parts, "--dev")
		if o.devRedis != DefaultDevRedisAddr {
			flag("dev-redis-addr", o.devRedis)
		}
	} else {
		if o.redisURL != DefaultRedisURL {
			flag("redis-url", redactURL(o.redisURL)) // a password shows as xxx: put it back
		}
		if o.clusterAddrs != "" {
			flag("redis-cluster-addrs", o.clusterAddrs)
		}
	}
	if o.prefix != "lettaq:" {
		flag("key-prefix", o.prefix)
	}
	for _, a := range args {
		parts = append(parts, shQuote(a))
	}
	return strings.Join(parts, " ")
}

// shQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
