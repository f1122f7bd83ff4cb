//go:build !linux

package app

import (
	"os"
	"testing"
)

func openPTY(t *testing.T) (*os.File, func() string) {
	t.Skip("pseudo-terminal tests run on Linux")
	return nil, nil
}
