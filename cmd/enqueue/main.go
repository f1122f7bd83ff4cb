// Command enqueue puts one chat message on the lettaq queue as an agent turn, optionally waits
// for the answer, and shows the turn journal.
//
//	go run ./cmd/enqueue --dev --wait "hello"
//	echo "hello" | go run ./cmd/enqueue --agent support-bot --chat 42 --wait   # an agent name or id
//	go run ./cmd/enqueue journal stalls --limit 10
//	go run ./cmd/enqueue journal show <task-id|otid|the beginning of one>
//
// Exit codes: 0 answered (or enqueued, without --wait), 1 the turn failed, 2 bad input or
// configuration, 3 --wait timed out, 4 the agent asks for a tool approval. See --help. Scripts
// need the built command (go build -o bin/ ./cmd/...): go run turns every non-zero exit into 1.
package main

import (
	"context"
	"os"

	"github.com/lettaq/lettaq/internal/app"
)

func main() {
	os.Exit(app.RunEnqueue(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
