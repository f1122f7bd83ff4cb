package app

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// RunCheckConfig is `worker check-config`: it reads the configuration as the worker does (flags
// and environment), checks what the worker checks before it connects to anything, and exits:
// ExitOK when the worker would start, ExitUsage (2) with the worker's message otherwise. It
// connects to nothing. docker-compose.yaml runs it once, as a service that is never restarted,
// before the workers: a missing token is one failure with its message, not a restart loop
// (Docker's restart policies cannot tell a configuration error from a crash).
func RunCheckConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := ParseWorkerSettings(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	if err == nil && !cfg.Dev {
		if _, cerr := cfg.RedisConnOpt(); cerr != nil {
			err = cerr
		} else {
			err = checkClusterKeyPrefix(cfg.KeyPrefix, cfg.RedisClusterAddrs)
		}
	}
	if err != nil {
		warnUnknownVars(NewLogger(stderr, strings.ToLower(getenv("LETTAQ_LOG_FORMAT")), "info"), getenv)
		fmt.Fprintf(stderr, "worker: configuration error:\n%v\n", err)
		return ExitUsage
	}
	fmt.Fprintln(stdout, "worker: configuration ok")
	return ExitOK
}
