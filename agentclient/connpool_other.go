//go:build !unix

package agentclient

import "net"

// canPeek: elsewhere an idle connection cannot be checked without a read
// of its own, so dedicated streams do not reuse connections.
const canPeek = false

func peek(net.Conn) peekResult { return peekGone }
