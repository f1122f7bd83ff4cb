package agentclient

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
)

// pieces is a byteSource that hands out its bytes n at a time, waiting
// bare like a dedicated stream's connection. It records whether the reader
// held a buffer whenever it was asked to read with nothing buffered.
type pieces struct {
	b        []byte
	n        int
	reads    int
	heldIdle int // reads that found the reader holding a buffer with nothing in it
}

func (p *pieces) waitsBare() bool { return true }

func (p *pieces) read(rd *sseReader) (int, error) {
	p.reads++
	if rd.buf != nil && rd.raw == 0 {
		p.heldIdle++
	}
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := copy(rd.space(), p.b[:min(p.n, len(p.b))])
	p.b = p.b[k:]
	return k, nil
}

// dechunk reads raw through an sseReader's body decoding, n bytes per read,
// and returns the body bytes and the error that ended it.
func dechunk(raw []byte, n int, dec bodyDecoder) ([]byte, error) {
	var rd sseReader
	rd.init(&pieces{b: raw, n: max(n, 1)}, dec, 0, 0, nil)
	defer rd.close()
	var body []byte
	for {
		err := rd.fill()
		body = append(body, rd.buf[rd.r:rd.w]...)
		rd.r = rd.w
		if err != nil {
			return body, err
		}
	}
}

func TestChunkedBody(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		err            error
	}{
		{"two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", io.EOF},
		{"extension and blanks", "5;name=v\r\nhello\r\n6 \t\r\n world\r\n0\r\n\r\n", "hello world", io.EOF},
		{"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", io.EOF},
		{"a trailer", "1\r\nx\r\n0\r\nX-A: b\r\n folded\r\n\r\n", "x", io.EOF},
		{"cut before the trailer's end", "1\r\nx\r\n0\r\n", "x", io.ErrUnexpectedEOF},
		{"trailer line without a colon", "1\r\nx\r\n0\r\nbad\r\n\r\n", "x", errChunkTrailer},
		{"trailer of bare LF lines, no CRLFCRLF: cut", "1\r\nx\r\n0\r\nX: y\n\r\n", "x", io.ErrUnexpectedEOF},
		{"trailer of bare LF lines, CRLFCRLF after", "1\r\nx\r\n0\r\nX: y\n\nz\r\n\r\n", "x", io.EOF},
		{"trailer name with a space", "1\r\nx\r\n0\r\nX y: z\r\n\r\n", "x", errChunkTrailer},
		{"trailer over 4 KiB", "1\r\nx\r\n0\r\nX: " + strings.Repeat("y", 4096) + "\r\n\r\n", "x", errChunkTrailer},
		{"bytes after the last chunk are not body", "1\r\nx\r\n0\r\n\r\ngarbage", "x", io.EOF},
		{"cut in a chunk", "5\r\nhel", "hel", io.ErrUnexpectedEOF},
		{"cut before the last chunk", "1\r\nx\r\n", "x", io.ErrUnexpectedEOF},
		{"bare LF", "1\nx\r\n0\r\n", "", errChunkBareLF},
		{"CR inside the line", "1\r;x\r\n", "", errChunkCR},
		{"no CRLF after data", "1\r\nxy\r\n", "x", errChunkMalformed},
		{"empty size", "\r\n", "", errChunkEmptySize},
		{"bad size", "1g\r\n", "", errChunkSizeByte},
		{"17 hex digits", "10000000000000000\r\n", "", errChunkSizeLarge},
		{"line too long", strings.Repeat("0", 5000), "", errChunkLineLong},
		{"extensions outweigh the data", strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\nx\r\n", 20), strings.Repeat("x", 16), errChunkTooMuchExt},
	} {
		for _, n := range []int{1, 3, 4096} {
			got, err := dechunk([]byte(tc.in), n, bodyDecoder{framing: framingChunked})
			if string(got) != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("%s, %d bytes a read: body %q, err %v; want %q, %v", tc.name, n, got, err, tc.want, tc.err)
			}
		}
	}
}

func TestLengthAndCloseBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		dec  bodyDecoder
		in   string
		want string
		err  error
	}{
		{"length", bodyDecoder{framing: framingLength, left: 5}, "helloXX", "hello", io.EOF},
		{"length cut", bodyDecoder{framing: framingLength, left: 5}, "hel", "hel", io.ErrUnexpectedEOF},
		{"until close", bodyDecoder{}, "hello", "hello", io.EOF},
	} {
		got, err := dechunk([]byte(tc.in), 2, tc.dec)
		if string(got) != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: body %q, err %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// FuzzChunkedMatchesNetHTTP: the stream's own chunked decoding agrees with
// net/http's body of a chunked response (its chunk reader, then its
// trailer), whatever the bytes and however they are split into reads.
func FuzzChunkedMatchesNetHTTP(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "3;a=b\r\nabc\r\n0\r\n", "a \r\n0123456789\r\n0\r\n",
		"1\nx\r\n0\r\n", "1\r\nxy", "ffffffffffffffff\r\n", "0\r\n", "2\r\nab\n\r\n", "1;\r\r\nx\r\n0\r\n",
		"0\r\nA: b\r\n\r\n", "0\r\nA: b\r\n c\r\n\r\n", "0\r\n A: b\r\n\r\n", "0\r\nA b\r\n\r\n", "0\r\n: b\r\n\r\n", "0\r\nA: \x00\r\n\r\n"} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, n uint8) {
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), bytes.NewReader(in))), nil)
		if err != nil {
			t.Fatal(err)
		}
		want, werr := io.ReadAll(resp.Body)
		got, gerr := dechunk(in, int(n), bodyDecoder{framing: framingChunked})
		if gerr == io.EOF {
			gerr = nil
		}
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("input %q, %d bytes a read:\nnet/http %q, %v\nours     %q, %v", in, n, want, werr, got, gerr)
		}
	})
}

// A reader that waits bare holds no buffer while it waits: the buffer goes
// back to the pool once its bytes are parsed.
func TestSSEWaitsWithoutBuffer(t *testing.T) {
	in := data(fxPing) + data(fxPing) + "data: " + strings.Repeat("x", 10000) + "\n\n" + data(fxPing)
	for _, n := range []int{7, 512, len(in)} {
		src := &pieces{b: []byte(in), n: n}
		var rd sseReader
		rd.init(src, bodyDecoder{}, 0, 0, nil)
		frames := 0
		for {
			if _, err := rd.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
			frames++
		}
		if frames != 4 || src.heldIdle != 0 {
			t.Errorf("%d bytes a read: %d frames, %d of %d reads held an empty buffer", n, frames, src.heldIdle, src.reads)
		}
		if rd.buf != nil || rd.pooled != nil {
			t.Errorf("%d bytes a read: buffer kept at EOF", n)
		}
	}
}

// FuzzSSEChunkedMatchesPlain: an SSE body read through chunked framing, in
// chunks and reads of any size, gives the frames it gives read plain.
func FuzzSSEChunkedMatchesPlain(f *testing.F) {
	for _, s := range seedStream() {
		f.Add([]byte(s), uint8(5), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk, read uint8) {
		var raw bytes.Buffer
		cw := httputil.NewChunkedWriter(&raw)
		for b := in; len(b) > 0; {
			k := min(int(chunk)+1, len(b))
			_, _ = cw.Write(b[:k])
			b = b[k:]
		}
		_ = cw.Close()
		raw.WriteString("\r\n")
		frames := func(src byteSource, dec bodyDecoder) (out []string, err error) {
			var rd sseReader
			rd.init(src, dec, 4096, 0, nil)
			defer rd.close()
			for {
				fr, err := rd.Next()
				if err != nil {
					return out, err
				}
				out = append(out, fr.Event+"\x00"+string(fr.Data))
			}
		}
		want, werr := frames(readerSource{bytes.NewReader(in)}, bodyDecoder{})
		got, gerr := frames(&pieces{b: raw.Bytes(), n: int(read) + 1}, bodyDecoder{framing: framingChunked})
		if (werr == io.EOF) != (gerr == io.EOF) || strings.Join(got, "\x01") != strings.Join(want, "\x01") {
			t.Fatalf("plain %q, %v\nchunked %q, %v", want, werr, got, gerr)
		}
	})
}
