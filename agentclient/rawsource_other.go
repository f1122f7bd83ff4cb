//go:build !unix

package agentclient

import "net"

// rawSource is unix-only: elsewhere a dedicated stream reads its
// connection with a buffer of its own (readerSource).
type rawSource struct {
	byteSource
	park    bool
	onEvent func(Event)
}

func (*rawSource) wait(*sseReader) {}

func newRawSource(net.Conn) *rawSource { return nil }
