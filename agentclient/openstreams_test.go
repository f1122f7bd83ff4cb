package agentclient

import (
	"context"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pingServer answers every connection with an event stream's head and one
// ping, then holds the connection without a goroutine or a buffer of its
// own: what the benchmark measures is the client's side of open streams.
type pingServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func newPingServer(b *testing.B) *pingServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &pingServer{ln: ln, done: make(chan struct{})}
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	ev := data(fxPing)
	resp += strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n"
	go func() {
		defer close(s.done)
		buf := make([]byte, 4<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(buf) // the request (its rest, if any, stays unread)
			_, _ = io.WriteString(c, resp)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *pingServer) close() {
	_ = s.ln.Close()
	<-s.done
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
}

// BenchmarkOpenStreams pins what an open stream costs while the agent
// thinks: streams wait for their next event, each on its own goroutine,
// and the live heap and the goroutines they hold (after a GC) are reported
// per stream. StreamNetHTTP, measured in the same run, is the baseline; the
// loopback server holds only its connections. (Stacks are left out: the
// runtime keeps dead goroutines' stacks for reuse, so their growth here is
// not what the streams hold; integration/bench reports the worker's.)
func BenchmarkOpenStreams(b *testing.B) {
	const streams = 500
	for _, tr := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		b.Run(strings.ReplaceAll(string(tr), "/", ""), func(b *testing.B) {
			srv := newPingServer(b)
			defer srv.close()
			c, err := New(Config{BaseURL: "http://" + srv.ln.Addr().String(), StreamTransport: tr,
				Clocks: Clocks{ContentIdle: -1}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.hc.CloseIdleConnections()
			var heap, gs float64
			settle := func(m *runtime.MemStats) {
				for range 2 {
					runtime.GC()
				}
				runtime.ReadMemStats(m)
			}
			for range b.N {
				var before, during runtime.MemStats
				settle(&before)
				g0 := runtime.NumGoroutine()
				ctx, cancel := context.WithCancel(context.Background())
				var open, done sync.WaitGroup
				open.Add(streams)
				done.Add(streams)
				for range streams {
					go func() {
						defer done.Done()
						var once sync.Once
						_ = c.SendStream(ctx, sendReq(), NewStreamState(), StreamOptions{OnEvent: func(Event) { once.Do(open.Done) }})
					}()
				}
				open.Wait()
				settle(&during)
				heap += float64(during.HeapAlloc) - float64(before.HeapAlloc)
				gs += float64(runtime.NumGoroutine() - g0)
				cancel()
				done.Wait()
				c.hc.CloseIdleConnections()
				// Goroutines a stream's end started (context.AfterFunc) finish
				// before the next round measures its baseline.
				for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > g0 && time.Now().Before(deadline); {
					runtime.Gosched()
				}
			}
			n := float64(b.N * streams)
			b.ReportMetric(heap/n, "heap-B/stream")
			b.ReportMetric(gs/n, "goroutines/stream")
			b.ReportMetric(0, "ns/op")
		})
	}
}
