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
var enqueueCommand = commandBeside(os.Args[0], "enqueue", os.Getenv)

// workerCommand is how enqueue's hints name the worker: the one beside enqueue as it was
// invoked (bin/enqueue → bin/worker), "go run ./cmd/worker" under go run.
var workerCommand = commandBeside(os.Args[0], "worker", os.Getenv)

// greetingEnqueue is how the dev worker's greeting names the enqueue command, given how the
// worker was invoked (os.Args[0]): "go run ./cmd/enqueue" under go run, else the enqueue built
// beside it (bin/worker → bin/enqueue, ./worker → ./enqueue; worker found on PATH → enqueue).
func greetingEnqueue(workerArg0 string) string {
	return commandBeside(workerArg0, "enqueue", os.Getenv)
}

// commandBeside names the command name (enqueue or worker) for a user who invoked arg0: "go
// run ./cmd/NAME" when arg0 is a binary go run built, else NAME in arg0's folder as arg0 was
// written, or the bare name when arg0 has no folder (found on PATH).
func commandBeside(arg0, name string, getenv func(string) string) string {
	a := filepath.ToSlash(arg0)
	if a == "" {
		return name
	}
	if builtByGoRun(a, getenv) {
		return "go run ./cmd/" + name
	}
	i := strings.LastIndexByte(a, '/')
	if i < 0 {
		return name
	}
	return shQuote(a[:i+1] + name)
}

// builtByGoRun reports whether the executable at path (slashes) is one go run built: in a
// go-build folder of the temporary directory, or in the build cache (GOCACHE, else its default
// under the user's cache folder), which go run uses for the executables it keeps; GOCACHE may
// be any path.
func builtByGoRun(path string, getenv func(string) string) bool {
	if strings.Contains(path, "/go-build") {
		return true
	}
	dirs := []string{getenv("GOCACHE"), getenv("GOTMPDIR")}
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "go-build"))
	}
	for _, d := range dirs {
		if d = strings.TrimRight(filepath.ToSlash(d), "/"); d != "" && strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

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
