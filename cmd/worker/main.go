// Command worker runs lettaq turns: it takes chat messages queued in Redis (Asynq), streams each
// to its Letta agent exactly once, continues lost turns instead of resending them, and writes
// reply events to a Redis Stream per conversation.
//
//	go run ./cmd/worker --dev     # everything in one process: in-memory Redis, Letta simulator
//	go run ./cmd/worker --help    # every flag and environment variable, with its default
//	worker healthcheck            # GET this worker's /readyz (for Docker's healthcheck)
//	worker check-config           # check the configuration, connect to nothing, and exit
//
// Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when the worker failed, 2 for bad
// configuration. `worker healthcheck` exits 0 when the worker is ready, 1 otherwise; `worker
// check-config` 0 when the worker would start, 2 (with the reason) when not. Build the command
// (go build -o bin/ ./cmd/...) when the exit code matters: go run turns every non-zero exit
// into 1.
package main

import (
	"context"
	"os"

	"github.com/lettaq/lettaq/internal/app"
)

func main() {
	os.Exit(app.RunWorker(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
