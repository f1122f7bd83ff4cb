package agentclient

import (
	"bytes"
	"errors"
	"io"
	"strings"
)

// bodyFraming is how a dedicated stream's response body ends: the SSE
// reader reads the connection itself, so it undoes the transfer coding
// (RFC 9112 §6, §7.1) in place, on the bytes it read.
type bodyFraming uint8

const (
	framingNone    bodyFraming = iota // the body ends when the connection does (or the reader is net/http's body)
	framingLength                     // Content-Length bytes
	framingChunked                    // Transfer-Encoding: chunked
)

// maxChunkLine bounds a chunk-size line (with its extensions and CRLF), as
// net/http's 4 KiB connection buffer does.
const maxChunkLine = 4096

// Chunked-coding states.
const (
	chunkSize uint8 = iota // reading a chunk-size line
	chunkData              // reading chunk data
	chunkCR                // the CR after chunk data
	chunkLF                // the LF after chunk data
	// After the last chunk, the trailer section: field lines, then an
	// empty line (RFC 9112 §7.1.2). It is consumed, not kept, so that a
	// connection can carry the next request once the message has ended.
	trailerStart   // at the start of a trailer line
	trailerStartCR // a CR at the start of a line
	trailerName    // in a field line's name
	trailerLine    // in a field line's value (after the colon, or a folded line)
	trailerLineCR  // a CR in a field line
	trailerSeek    // the empty line was read: looking for the CRLFCRLF net/http wants
)

// maxTrailer bounds the trailer section, as net/http's client bounds it
// (its 4 KiB connection buffer must hold the whole trailer).
const maxTrailer = 4096

var (
	errChunkBareLF     = errors.New("chunked line ends with bare LF")
	errChunkCR         = errors.New("invalid CR in chunked line")
	errChunkLineLong   = errors.New("chunked line too long")
	errChunkEmptySize  = errors.New("empty hex number for chunk length")
	errChunkSizeByte   = errors.New("invalid byte in chunk length")
	errChunkSizeLarge  = errors.New("http chunk length too large")
	errChunkMalformed  = errors.New("malformed chunked encoding")
	errChunkTooMuchExt = errors.New("chunked encoding contains too much non-data")
	errChunkTrailer    = errors.New("malformed trailer after chunked body")
)

// bodyDecoder undoes a body's framing. Its rules are net/http's
// (net/http/internal/chunked.go): a chunk line ends in CRLF, holds no other
// CR, is at most 4096 bytes long; trailing blanks and extensions are
// dropped; the size has at most 16 hex digits; chunk data is followed by
// CRLF; extensions may not outweigh the data by more than 16 KiB. The
// trailer after the last chunk is checked, consumed and dropped, and the
// body ends at its end (end), as net/http's body does: a malformed trailer
// (bad) is a read error. After the end the connection may carry another
// request (see connPool).
type bodyDecoder struct {
	framing bodyFraming
	state   uint8
	left    uint64 // framingLength: body bytes to come; framingChunked: bytes left in the chunk
	excess  int64  // chunk overhead beyond what the data allows (see net/http)
	done    bool   // the body is complete: what follows is not body
	// Whether the connection could carry another request: end says the
	// message ended cleanly (the trailer's empty line, or Content-Length
	// reached), extra that bytes came after that end (the server sent what
	// no request asked for), bad that the trailer was malformed or too
	// long (which also ends the read with an error).
	end, extra, bad bool
	trailer         uint16 // trailer bytes so far
	crlf            uint8  // how much of "\r\n\r\n" the trailer's last bytes are
}

// decode turns the raw bytes p into body bytes, in place: the body bytes
// are written to p[:body]; used raw bytes were consumed. The bytes p[used:]
// (the start of a chunk line, or of the CRLF after chunk data) are left
// for the next call, which must see them again followed by what comes next.
func (d *bodyDecoder) decode(p []byte) (body, used int, err error) {
	switch d.framing {
	case framingNone:
		return len(p), len(p), nil
	case framingLength:
		n := len(p)
		if uint64(n) >= d.left {
			n = int(d.left)
			d.done, d.end = true, true
			d.extra = d.extra || n < len(p)
		}
		d.left -= uint64(n)
		return n, len(p), nil
	}
	for used < len(p) && !d.end && !d.bad {
		switch d.state {
		case chunkSize:
			i := bytes.IndexByte(p[used:], '\n')
			if i < 0 {
				if len(p)-used >= maxChunkLine {
					return body, used, errChunkLineLong
				}
				return body, used, nil // wait for the rest of the line
			}
			line := p[used : used+i+1]
			used += i + 1
			if len(line) > maxChunkLine {
				return body, used, errChunkLineLong
			}
			n, err := chunkLine(line)
			if err != nil {
				return body, used, err
			}
			d.excess += int64(len(line))
			d.excess -= 16 + 2*int64(n)
			d.excess = max(d.excess, 0)
			if d.excess > 16<<10 {
				return body, used, errChunkTooMuchExt
			}
			if n == 0 {
				d.done, d.state = true, trailerStart
				break
			}
			d.left, d.state = n, chunkData
		case chunkData:
			k := len(p) - used
			if uint64(k) > d.left {
				k = int(d.left)
			}
			copy(p[body:], p[used:used+k])
			body += k
			used += k
			d.left -= uint64(k)
			if d.left == 0 {
				d.state = chunkCR
			}
		case chunkCR:
			if p[used] != '\r' {
				return body, used, errChunkMalformed
			}
			used++
			d.state = chunkLF
		case chunkLF:
			if p[used] != '\n' {
				return body, used, errChunkMalformed
			}
			used++
			d.state = chunkSize
		default: // the trailer, byte by byte: nothing of it is kept
			used += d.trailerByte(p[used])
		}
	}
	if d.end && used < len(p) {
		d.extra = true
	}
	return body, used, nil
}

// trailerByte consumes one byte of the trailer section and reports 1. The
// trailer ends where net/http's client ends it (readTrailer): at once on
// an empty first line "\r\n"; otherwise it must hold "\r\n\r\n" within
// its first maxTrailer bytes, and its lines, up to the first empty one,
// must be a MIME header (textproto): lines ending in LF or CRLF, each a
// field "name: value" (a name of token bytes, a value of visible bytes,
// spaces, tabs and bytes over 0x7f) or, after the first, a folded line
// going on with the value. What follows the empty line, up to that
// "\r\n\r\n", is not the message's: the connection is not reused (extra).
func (d *bodyDecoder) trailerByte(b byte) int {
	if d.trailer++; d.trailer > maxTrailer {
		d.bad = true
		return 1
	}
	switch {
	case b == "\r\n\r\n"[d.crlf]:
		d.crlf++
	case b == '\r':
		d.crlf = 1
	default:
		d.crlf = 0
	}
	switch d.state {
	case trailerStart:
		switch {
		case b == '\r':
			d.state = trailerStartCR
		case b == '\n':
			d.headerEnd()
		case (b == ' ' || b == '\t') && d.trailer > 1:
			d.state = trailerLine // a folded line goes on with the value
		case tokenByte(b):
			d.state = trailerName
		default:
			d.bad = true // no name, a first line folded
		}
	case trailerStartCR:
		if b != '\n' {
			d.bad = true
			break
		}
		d.headerEnd()
	case trailerName:
		switch {
		case b == ':':
			d.state = trailerLine
		case !tokenByte(b):
			d.bad = true
		}
	case trailerLine:
		switch {
		case b == '\r':
			d.state = trailerLineCR
		case b == '\n':
			d.state = trailerStart
		case b < ' ' && b != '\t' || b == 0x7f:
			d.bad = true
		}
	case trailerLineCR:
		d.bad = b != '\n'
		d.state = trailerStart
	case trailerSeek:
		d.extra = true
		d.end = d.crlf == 4
	}
	return 1
}

// headerEnd is the trailer's empty line: the end of the message if the
// trailer was that line alone or held "\r\n\r\n", else the start of the
// search for it.
func (d *bodyDecoder) headerEnd() {
	if d.trailer == 2 && d.crlf == 2 || d.crlf == 4 {
		d.end = true
		return
	}
	d.state = trailerSeek
}

// tokenByte reports whether b may be in a field name (RFC 9110 tchar).
func tokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return b < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// chunkLine parses one chunk-size line, LF included.
func chunkLine(line []byte) (uint64, error) {
	switch i := bytes.IndexByte(line, '\r'); {
	case i < 0:
		return 0, errChunkBareLF
	case i != len(line)-2:
		return 0, errChunkCR
	}
	line = line[:len(line)-2]
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	line, _, _ = bytes.Cut(line, []byte{';'})
	if len(line) == 0 {
		return 0, errChunkEmptySize
	}
	var n uint64
	for i, b := range line {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, errChunkSizeByte
		}
		if i == 16 {
			return 0, errChunkSizeLarge
		}
		n = n<<4 | uint64(b)
	}
	return n, nil
}

// atEOF is the error for the end of the raw bytes: io.EOF when the body
// was complete, its trailer included (or had no framing),
// io.ErrUnexpectedEOF when it was cut.
func (d *bodyDecoder) atEOF() error {
	if d.framing == framingNone || d.end {
		return io.EOF
	}
	return io.ErrUnexpectedEOF
}
