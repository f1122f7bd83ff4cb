package lettasim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// discardStream is a ResponseWriter that keeps only the last bytes written: enough to tell a
// stream ended with [DONE], with none of net/http's costs.
type discardStream struct {
	h    http.Header
	tail []byte
	n    int
}

func (w *discardStream) Header() http.Header { return w.h }
func (w *discardStream) WriteHeader(int)     {}
func (w *discardStream) Flush()              {}
func (w *discardStream) Write(b []byte) (int, error) {
	w.n += len(b)
	w.tail = append(w.tail[:0], b...)
	return len(b), nil
}

// lettaqSendBody is what lettaq's agentclient sends for a text turn (encoding/json of its
// sendBody).
const lettaqSendBody = `{"messages":[{"type":"message","role":"user","content":"hi","otid":"7f1c2a54-3b1e-4c5d-9e8f-0a1b2c3d4e5f"}],"stream_tokens":false,"include_pings":true,"background":false}`

// BenchmarkInstantStreamTurn is the simulator's own CPU for one instant streaming turn (the
// bench's throughput workload) without the HTTP server: the handler, the run's goroutine and
// the frames. Compare builds with benchstat; the end-to-end figure is the bench's "simulator
// process CPU per instant turn".
func BenchmarkInstantStreamTurn(b *testing.B) {
	s := New(Config{AutoCreateAgents: true, DefaultScript: QuickScript("ok")})
	defer s.Close()
	body := []byte(lettaqSendBody)
	w := &discardStream{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, "/v1/agents/agent-00000000-0000-4000-8000-000000000001/messages/stream",
			bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		w.h = http.Header{}
		s.ServeHTTP(w, req)
		if !bytes.Equal(w.tail, []byte("data: [DONE]\n\n")) {
			b.Fatalf("the stream ended with %q", w.tail)
		}
	}
}

// wantDate is what appendDate wrote before it formatted digits itself.
func wantDate(t time.Time) string { return `"` + t.UTC().Format(dateLayout) + `"` }

func TestAppendDateMatchesFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -11*3600)}
	times := []time.Time{
		time.Now(), // carries a monotonic reading
		{},
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999, time.UTC),
		time.Date(2024, 2, 29, 12, 30, 45, 123456789, time.FixedZone("x", 3600)),
		time.Unix(1<<40, 0),
		time.Unix(-1<<40, 0),
	}
	for range 200_000 {
		sec := rng.Int64N(2*400*366*86400) - 400*366*86400 + time.Now().Unix() // within ±400 years of now
		if rng.IntN(10) == 0 {
			sec = rng.Int64N(1<<42) - 1<<41 // anywhere, years far out of 0..9999 too
		}
		times = append(times, time.Unix(sec, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))]))
	}
	for _, tm := range times {
		if got, want := string(appendDate([]byte("x"), tm)), "x"+wantDate(tm); got != want {
			t.Fatalf("appendDate(%v) = %s, want %s", tm, got, want)
		}
	}
}

func FuzzAppendDate(f *testing.F) {
	f.Add(int64(1735787045), int64(123456789))
	f.Add(int64(-62167219200), int64(0))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tm := time.Unix(sec, nsec)
		if got, want := string(appendDate(nil, tm)), wantDate(tm); got != want {
			t.Fatalf("appendDate(%v) = %s, want %s", tm, got, want)
		}
	})
}

func BenchmarkAppendDate(b *testing.B) {
	buf := make([]byte, 0, 64)
	now := time.Now()
	for b.Loop() {
		buf = appendDate(buf[:0], now)
	}
}

// sendBodies are send bodies decodeSendBody's fast path takes, and their near misses.
var sendBodies = []string{
	lettaqSendBody,
	`{"messages":[{"type":"message","role":"user","content":"hi","otid":"o1"}],"streaming":true,"stream_tokens":false,"include_pings":true,"background":true,"max_steps":7,"agent_id":"agent-1"}`,
	` { "messages" : [ { "role" : "user" , "content" : "a\nb \u00e9 \"q\" <&>" , "otid" : "o2" , "sender_id" : "s" } ] } ` + "\t\r\n",
	`{"messages":[{"role":"user","content":"x"},{"role":"system","content":"y","otid":"o3"},{"role":"assistant","content":"z"}]}`,
	`{"messages":[{"type":null,"role":null,"content":"x","otid":null,"sender_id":null}],"streaming":null,"stream_tokens":null,"include_pings":null,"background":null,"max_steps":null,"agent_id":null,"input":null}`,
	`{"input":"hello","include_pings":false}`,
	`{"input":null,"messages":null}`,
	`{"messages":null}`,
	`{"input":["a"]}`,
	`{"input":[{"type":"text","text":"hi"}]}`,
	`{}`, `null`, `[]`, `""`, ``, `{"messages":[]}`, `{"messages":{}}`, `{"messages":"hi"}`,
	`{"messages":[{"role":"user","content":"hi"}],"messages":[{"role":"user","content":"ho"}]}`,
	`{"messages":[{"role":"user","content":"hi","content":"ho"}]}`,
	`{"Messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"Role":"user","content":"hi"}]}`,
	`{"messag\u0065s":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"user","content":"hi"}],"use_assistant_message":true}`,
	`{"messages":[{"role":"user","content":"hi","name":"n"}]}`,
	`{"messages":[{"role":"user","content":"hi"}]} x`,
	`{"messages":[{"role":"user","content":"hi"}],}`,
	`{"messages":[{"role":"user","content":"hi"},]}`,
	`{"messages":[{"role":"user","content":"hi"}]`,
	`{"messages":[{"role":"user","content":"h` + "\x01" + `i"}]}`,
	`{"messages":[{"role":"user","content":"h` + "\xff" + `i"}]}`,
	`{"messages":[{"role":"user","content":"\ud800"}]}`,
	`{"messages":[{"role":"user","content":"\x"}]}`,
	`{"messages":[{"role":"user","content":"a\\"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
	`{"messages":[{"role":"user","content":null}]}`,
	`{"messages":[{"role":"user","content":1}]}`,
	`{"messages":[{"role":"user"}]}`,
	`{"messages":[{"role":"robot","content":"hi"}]}`,
	`{"messages":[{"role":1,"content":"hi"}]}`,
	`{"messages":[{"type":"approval","approvals":[]}]}`,
	`{"messages":[{"type":"mess\u0061ge","role":"user","content":"hi"}]}`,
	`{"messages":[{"type":"other","role":"user","content":"hi"}]}`,
	`{"messages":["hi"]}`,
	`{"messages":[null]}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":0}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":-3}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":-0}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":01}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":1.5}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":1e2}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":99999999999999999999}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":-}`,
	`{"messages":[{"role":"user","content":"hi"}],"max_steps":"5"}`,
	`{"messages":[{"role":"user","content":"hi"}],"streaming":"true"}`,
	`{"messages":[{"role":"user","content":"hi"}],"streaming":truex}`,
	`{"messages":[{"role":"user","content":"hi"}],"background":tru}`,
	`{"messages":[{"role":"user","content":"hi"}],"agent_id":5}`,
	`{"messages":[{"role":"user","content":"hi"}],"agent_id":"a\tb"}`,
	`{"messages":[{"role":"user","content":"hi"}],"agent_id":"a\u0041"}`,
	"\ufeff" + `{"messages":[{"role":"user","content":"hi"}]}`,
}

// checkSendBody fails when decodeSendBody and json.Unmarshal disagree about raw, or when the
// messages parsed from their bodies differ. It reports whether the fast path took raw.
func checkSendBody(t *testing.T, raw []byte) (fast bool) {
	t.Helper()
	var fb sendBody
	fast = fastSendBody(raw, &fb)
	var got, want sendBody
	gerr, werr := decodeSendBody(raw, &got), json.Unmarshal(raw, &want)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%q: decodeSendBody error %v, json.Unmarshal error %v", raw, gerr, werr)
	}
	if werr != nil {
		return fast
	}
	pre := got.pre
	got.pre = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decodeSendBody gave\n%+v, json.Unmarshal\n%+v", raw, got, want)
	}
	got.pre = pre
	gm, gerr := parseMessages(&got)
	wm, werr := parseMessages(&want)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%q: parseMessages error %v after decodeSendBody, %v after json.Unmarshal", raw, gerr, werr)
	}
	for _, ms := range [][]inMessage{gm, wm} {
		for i := range ms {
			if !bytes.Contains(raw, []byte(ms[i].otid)) {
				ms[i].otid = "(minted)"
			}
		}
	}
	if !reflect.DeepEqual(gm, wm) {
		t.Fatalf("%q: parseMessages gave\n%+v after decodeSendBody,\n%+v after json.Unmarshal", raw, gm, wm)
	}
	return fast
}

// checkStringContent fails when parseContent reads a JSON string otherwise than json.Unmarshal.
func checkStringContent(t *testing.T, raw []byte) {
	t.Helper()
	if !json.Valid(raw) || raw[0] != '"' {
		return
	}
	var want string
	werr := json.Unmarshal(raw, &want)
	c, err := parseContent(raw, "input")
	if err != nil || werr != nil || c.text != want || c.asParts {
		t.Fatalf("%q: parseContent = %q, %v; json.Unmarshal = %q, %v", raw, c.text, err, want, werr)
	}
}

func TestDecodeSendBodyMatchesJSON(t *testing.T) {
	took := 0
	for _, s := range sendBodies {
		raw := []byte(s)
		// Every prefix, too: truncated bodies must fail the same way.
		for n := 0; n <= len(raw); n++ {
			if checkSendBody(t, raw[:n]) && n == len(raw) {
				took++
			}
		}
	}
	if !fastSendBody([]byte(lettaqSendBody), &sendBody{}) {
		t.Fatal("the fast path gave up on the body lettaq sends")
	}
	if took < 8 {
		t.Fatalf("the fast path took only %d of the bodies", took)
	}
	for _, s := range []string{`"hi"`, `"a\nb"`, `"\u00e9\ud83d\ude00"`, `"é"`, "\"\xff\"", `"\ud800"`, `""`, `"<&>"`} {
		checkStringContent(t, []byte(s))
	}
}

func FuzzDecodeSendBody(f *testing.F) {
	for _, s := range sendBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkSendBody(t, raw)
		checkStringContent(t, raw)
	})
}

func TestCountFieldsMatchesStringsFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "bc", " ", "  ", "\t", "\n", "\v", "\f", "\r", "\u0085", "\u00a0", "\u2003", "\u3000", "é", "\xff", "\xe2\x80", "[[sim", "x"}
	cases := []string{"", " ", "a", " a ", "you said: hi", "The user wrote to me. I will answer."}
	for range 20_000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		if got, want := countFields(s), len(strings.Fields(s)); got != want {
			t.Fatalf("countFields(%q) = %d, want %d", s, got, want)
		}
	}
}

func FuzzCountFields(f *testing.F) {
	f.Add("a b\u00a0c\xff d")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := countFields(s), len(strings.Fields(s)); got != want {
			t.Fatalf("countFields(%q) = %d, want %d", s, got, want)
		}
	})
}
