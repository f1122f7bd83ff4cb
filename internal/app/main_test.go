package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestMain lets the test binary be the commands themselves: started under the name enqueue or
// worker (a link named so, as bin/enqueue and bin/worker are), it runs that command, so that
// tests run a printed command line as printed, by a shell.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "enqueue":
		os.Exit(RunEnqueue(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	case "worker":
		os.Exit(RunWorker(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
