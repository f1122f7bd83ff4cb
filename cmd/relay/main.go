// Command relay carries lettaq's reply streams into the chats: typing, tool status, the
// growing answer by edits, approvals as buttons, /stop. Replicas share the chats by shards
// and take over a dead one's within LETTAQ_RELAY_LEASE. See docs/relay.md.
//
//	relay --help    # every flag and environment variable, with its default
//
// Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when the relay failed, 2 for bad
// configuration (the message names the variable).
package main

import (
	"context"
	"os"

	"github.com/lettaq/lettaq/internal/app"
)

func main() {
	os.Exit(app.RunRelay(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
