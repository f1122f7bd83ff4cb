package agentclient

import (
	"bytes"
	"errors"
	"io"
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
	trailerStartCR // a CR at the start of a line: the empty line that ends the message
	trailerLine    // inside a trailer field line
	trailerLineCR  // a CR inside a field line
)

// maxTrailer bounds the trailer section a reused connection may have
// carried (net/http's client ignores trailers it did not ask for too, but
// reads them; a bigger one is not worth keeping the connection for).
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
)

// bodyDecoder undoes a body's framing. Its rules are net/http's
// (net/http/internal/chunked.go): a chunk line ends in CRLF, holds no other
// CR, is at most 4096 bytes long; trailing blanks and extensions are
// dropped; the size has at most 16 hex digits; chunk data is followed by
// CRLF; extensions may not outweigh the data by more than 16 KiB. The
// trailer after the last chunk is consumed and dropped; its end is the end
// of the message (end), after which the connection may carry another
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
	// long. None of them changes what the stream reads.
	end, extra, bad bool
	trailer         uint16 // trailer bytes so far
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

// trailerByte consumes one byte of the trailer section and reports 1.
func (d *bodyDecoder) trailerByte(b byte) int {
	if d.trailer++; d.trailer > maxTrailer {
		d.bad = true
		return 1
	}
	switch d.state {
	case trailerStart:
		switch b {
		case '\r':
			d.state = trailerStartCR
		case '\n':
			d.bad = true // bare LF
		default:
			d.state = trailerLine
		}
	case trailerStartCR:
		if b != '\n' {
			d.bad = true
		}
		d.end = true
	case trailerLine:
		switch b {
		case '\r':
			d.state = trailerLineCR
		case '\n':
			d.bad = true
		}
	case trailerLineCR:
		if b != '\n' {
			d.bad = true
		}
		d.state = trailerStart
	}
	return 1
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
// was complete (or had no framing), io.ErrUnexpectedEOF when it was cut.
func (d *bodyDecoder) atEOF() error {
	if d.framing == framingNone || d.done {
		return io.EOF
	}
	return io.ErrUnexpectedEOF
}
