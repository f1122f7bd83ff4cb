package app

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// chromiumPath is Debian's chromium, or "" (the test is skipped, or fails under
// LETTAQ_REQUIRE_BROWSER=1, as .ci/run sets it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LETTAQ_REQUIRE_BROWSER") == "1" {
		t.Fatal("LETTAQ_REQUIRE_BROWSER=1 and no chromium on PATH (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH: the browser test of the web chat page is skipped (apt-get install chromium; LETTAQ_REQUIRE_BROWSER=1 makes this a failure)")
	return ""
}

// bubble is one message as the page shows it.
type bubble struct {
	Who      string   `json:"who"` // me | agent
	Task     string   `json:"task"`
	Final    bool     `json:"final"`
	Text     string   `json:"text"`
	Status   string   `json:"status"`
	Answer   string   `json:"answer"`
	Meta     string   `json:"meta"`
	Journal  string   `json:"journal"`
	Buttons  []string `json:"buttons"`
	Decision string   `json:"decision"`
}

// pageState reads the conversation from the page's DOM.
const pageState = `[...document.querySelectorAll('#log > .msg')].map(e => ({
	who: e.classList.contains('me') ? 'me' : 'agent',
	task: e.dataset.task || '',
	final: e.dataset.final === '1',
	text: e.firstChild && e.firstChild.nodeType === 3 ? e.firstChild.textContent : '',
	status: (e.querySelector('.status') || {}).textContent || '',
	answer: (e.querySelector('.answer') || {}).textContent || '',
	meta: (e.querySelector('.meta') || {}).textContent || '',
	journal: (e.querySelector('.meta a') || {}).href || '',
	buttons: [...e.querySelectorAll('button')].map(b => b.textContent),
	decision: (e.querySelector('.decision') || {}).textContent || '',
}))`

type browserPage struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int
	start time.Time
}

func (p *browserPage) state() []bubble {
	p.t.Helper()
	bs, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]bubble](pageState))
	if err != nil {
		p.t.Fatalf("read the page: %v", err)
	}
	return bs
}

func (p *browserPage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.fail("%s: %v", what, err)
	}
}

// wait polls the page until the JavaScript condition holds.
func (p *browserPage) wait(what, cond string, timeout time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		p.fail("waiting for %s: %v", what, err)
	}
}

func (p *browserPage) fail(format string, args ...any) {
	p.t.Helper()
	p.shot("failure")
	b, _ := json.MarshalIndent(p.state(), "", "  ")
	p.t.Fatalf(format+"\nthe page shows:\n%s", append(args, b)...)
}

// shot saves a screenshot of the viewport as NN-name.png.
func (p *browserPage) shot(name string) {
	p.t.Helper()
	p.n++
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	file := fmt.Sprintf("%02d-%s.png", p.n, name)
	if err := os.WriteFile(filepath.Join(p.shots, file), png, 0o644); err != nil {
		p.t.Error(err)
	}
	p.t.Logf("%5.1fs %s", time.Since(p.start).Seconds(), file)
}

// pick chooses an agent in the picker, which starts a new chat with it.
func (p *browserPage) pick(agent string) {
	p.t.Helper()
	p.do("pick "+agent, chromedp.SetValue("#agent", agent),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('agent').dispatchEvent(new Event('change'))`))
	p.wait("an empty chat", `document.querySelectorAll('#log > .msg').length === 0`, 5*time.Second)
}

// say types a message and sends it with Enter.
func (p *browserPage) say(text string) {
	p.t.Helper()
	p.do("type a message", chromedp.SetValue("#text", text), chromedp.SendKeys("#text", kb.Enter))
}

// agentBubbles are the agent's messages the page shows.
func agentBubbles(bs []bubble) []bubble {
	var out []bubble
	for _, b := range bs {
		if b.Who == "agent" {
			out = append(out, b)
		}
	}
	return out
}

// The web chat page in a real browser (headless Chromium) against a dev-mode worker: a quick
// answer, an image, a tool call, the slow agent across a lost stream, an approval approved from
// its button, a stop, a dropped connection and a reload mid-answer (with a second tab open),
// and an agent-initiated message, asserting what the page shows at each step. Screenshots go to a folder it logs (LETTAQ_BROWSER_SHOTS picks it).
func TestWebChatInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser: skipped with -short")
	}
	chromium := chromiumPath(t)
	start := time.Now()
	// Short clocks: the stream clock fires after 2.5s, so a 4s thought outlives it.
	r, _ := startDevWorkerWith(t, "--stream-total=2500ms", "--stall-timeout=1500ms", "--content-idle-notice=1s")
	// The browser reaches the worker through a proxy that can drop its connections.
	target, _ := url.Parse("http://" + r.HTTPAddr)
	var resumes atomic.Int32 // event streams asked for with Last-Event-ID
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Last-Event-ID") != "" {
			resumes.Add(1)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1                    // pass each event on at once
		rp.ErrorLog = log.New(io.Discard, "", 0) // a page that goes away is no error here
		rp.ServeHTTP(w, req)
	}))
	defer proxy.Close()
	base := proxy.URL + "/chat/"

	shots := os.Getenv("LETTAQ_BROWSER_SHOTS")
	if shots == "" {
		var err error
		if shots, err = os.MkdirTemp("", "lettaq-webchat-shots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", shots)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(820, 560),
		chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // root: Chromium's sandbox refuses to start
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	var jsErrors syncBuf // what the page threw
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			d := e.ExceptionDetails
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			fmt.Fprintf(&jsErrors, "%s:%d: %s\n", d.URL, d.LineNumber+1, desc)
		}
	}))
	defer cancel()
	p := &browserPage{t: t, ctx: ctx, shots: shots, start: start}
	p.do("open the page", chromedp.EmulateViewport(820, 560), chromedp.Navigate(base))
	p.wait("the agents", `document.querySelectorAll('#agent option').length === 4 && document.body.dataset.connected === '1'`, 10*time.Second)

	// 1. A quick answer (the first agent, demo, is picked on a first visit).
	p.say("hello from the browser")
	p.wait("the answer", `[...document.querySelectorAll('.agent[data-final="1"] .answer')].some(e => e.textContent === 'you said: hello from the browser')`, 20*time.Second)
	bs := p.state()
	if len(bs) != 2 || bs[0].Who != "me" || bs[0].Text != "hello from the browser" || bs[1].Status != "" {
		p.fail("after a quick answer: want my message, then the answer")
	}
	if j, _ := url.PathUnescape(bs[1].Journal); !strings.HasSuffix(j, "/turns/"+bs[1].Task) {
		p.fail("the turn's journal link is %q, want …/turns/%s", bs[1].Journal, bs[1].Task)
	}
	// The journal link answers (the same server and auth).
	code, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch(document.querySelector('.agent .meta a').href).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || code != 200 {
		p.fail("GET the journal link: %d %v", code, err)
	}
	p.shot("quick-answer")

	// 1b. An image, uploaded with the file picker, goes to the agent with the text.
	img := filepath.Join(t.TempDir(), "dot.png")
	writeTestPNG(t, img)
	p.do("attach an image", chromedp.SetUploadFiles("#image", []string{img}))
	p.wait("the image attached", `document.getElementById('attached').textContent === '1 image attached'`, 5*time.Second)
	p.say("look")
	p.wait("the answer to the image", `[...document.querySelectorAll('.agent[data-final="1"] .answer')].some(e => e.textContent === 'you said: look (and 1 image)')`, 20*time.Second)
	if bs := p.state(); len(bs) != 4 || bs[2].Text != "look" || bs[2].Meta != "1 image" {
		p.fail("after the image: want my message with its image noted, then the answer")
	}
	if got := r.Dev.Sim.UserMessages(r.Dev.Agents[DemoAgent]); len(got) != 2 || got[1].Images != 1 {
		p.fail("the agent received %+v, want a second message with 1 image", got)
	}
	p.shot("image-answer")

	// 2. A tool call: its status line while it runs, then the answer.
	p.pick(DemoAgentTools)
	p.say("what is lettaq?")
	p.wait("the tool's status line", `[...document.querySelectorAll('.agent .status')].some(e => e.textContent === '⚙ web_search…')`, 15*time.Second)
	p.shot("tool-running")
	p.wait("the answer after the tool", `[...document.querySelectorAll('.agent[data-final="1"] .answer')].some(e => e.textContent.startsWith('I looked it up'))`, 20*time.Second)
	if a := agentBubbles(p.state()); len(a) != 1 || !strings.Contains(a[0].Meta, "tool web_search") {
		p.fail("after the tool call: want one answer noting the tool")
	}
	p.shot("tool-answer")

	// 3. The slow agent across a lost stream: the stream clock (2.5s) fires while it thinks
	// (4s); the worker recovers the same run and the answer comes once.
	p.pick(DemoAgentSlow)
	p.say("[[sim think=4s]] think hard")
	p.wait("the recovered answer", `[...document.querySelectorAll('.agent[data-final="1"] .answer')].some(e => e.textContent === 'you said: think hard')`, 30*time.Second)
	if a := agentBubbles(p.state()); len(a) != 1 || !strings.Contains(a[0].Meta, "stream lost, same run recovered") {
		p.fail("the slow turn: want one answer that says the stream was lost and recovered")
	}
	if n := len(r.Dev.Sim.UserMessages(r.Dev.Agents[DemoAgentSlow])); n != 1 {
		p.fail("the slow agent received the message %d times, want 1", n)
	}
	p.shot("slow-recovered")

	// 4. An approval, approved from its button; a second answer to it is the same one.
	p.pick(DemoAgentApproval)
	p.say("email the team")
	p.wait("the approval buttons", `!!document.querySelector('.approval button.approve')`, 15*time.Second)
	if a := agentBubbles(p.state()); len(a) != 1 || strings.Join(a[0].Buttons, ",") != "Approve,Deny" {
		p.fail("want one approval request with Approve and Deny")
	}
	p.shot("approval-asked")
	p.do("press Approve", chromedp.Click(".approval button.approve"))
	// The press's own POST is sent after the click returns: wait until its answer is in the
	// stream (the request shows the decision) before answering again, or the second answer
	// could be the first to arrive.
	p.wait("the press answered", `[...document.querySelectorAll('.decision')].some(e => e.textContent === '✓ Approved.')`, 15*time.Second)
	dup, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(async () => {
		const s = JSON.parse(localStorage.getItem('lettaq.webchat'));
		const req = document.querySelector('.approval').dataset.request;
		const r = await fetch('approve', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({chat: s.chat, request: req, approve: true})});
		return (await r.json()).duplicate === true;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil || !dup {
		p.fail("a second answer to the request: duplicate %v, err %v", dup, err)
	}
	p.wait("the approved answer", `[...document.querySelectorAll('.agent[data-final="1"] .answer')].some(e => e.textContent === 'Done: I emailed the team at team@example.com.')`, 20*time.Second)
	a := agentBubbles(p.state())
	if len(a) != 2 || a[0].Decision != "✓ Approved." || len(a[0].Buttons) != 0 {
		p.fail("after approving: want the request marked approved without buttons, then the answer")
	}
	p.shot("approved")

	// 5. Stop: the running turn ends as stopped.
	p.pick(DemoAgentSlow)
	p.say("[[sim think=60s]] take your time")
	p.wait("the turn running", `!document.getElementById('stop').disabled && [...document.querySelectorAll('.agent .status')].some(e => e.textContent.startsWith('thinking'))`, 15*time.Second)
	p.do("press Stop", chromedp.Click("#stop"))
	p.wait("the stopped turn", `[...document.querySelectorAll('.agent[data-final="1"] .status')].some(e => e.textContent === 'Stopped.')`, 20*time.Second)
	p.wait("Stop disabled", `document.getElementById('stop').disabled`, 5*time.Second)
	// The stop reached the agent: the run of the thought (the slow agent's last) was cancelled.
	if runs := r.Dev.Sim.Runs(r.Dev.Agents[DemoAgentSlow]); len(runs) == 0 || runs[len(runs)-1].Status != "cancelled" {
		p.fail("the slow agent's runs %+v: want the last one cancelled", runs)
	}
	p.shot("stopped")

	// 6. A dropped connection mid-answer: the browser reconnects with Last-Event-ID, and the
	// answer goes on, nothing doubled.
	p.pick(DemoAgent)
	long := strings.TrimSpace(strings.Repeat("the answer grows word by word while the page reloads ", 12))
	p.say(long)
	p.wait("the answer growing", `[...document.querySelectorAll('.agent .answer')].some(e => e.textContent.length > 20) && !document.querySelector('.agent[data-final="1"]')`, 15*time.Second)
	proxy.CloseClientConnections()
	p.wait("the whole answer after the drop", `!!document.querySelector('.agent[data-final="1"]')`, 20*time.Second)
	want := "you said: " + long
	if bs := p.state(); len(bs) != 2 || bs[0].Text != long || bs[1].Answer != want {
		p.fail("after a dropped connection: want my message once and the whole answer once")
	}
	if resumes.Load() == 0 {
		p.fail("the browser did not reconnect with Last-Event-ID")
	}
	p.shot("dropped-connection")

	// 7. A reload mid-answer, with a second tab on the same chat: the answer goes on from the
	// stream, once, in both.
	p.pick(DemoAgent)
	p.say(long)
	p.wait("the answer growing", `[...document.querySelectorAll('.agent .answer')].some(e => e.textContent.length > 20) && !document.querySelector('.agent[data-final="1"]')`, 15*time.Second)
	tab2, cancel2 := chromedp.NewContext(ctx)
	defer cancel2()
	p2 := &browserPage{t: t, ctx: tab2, shots: shots, n: 50, start: start}
	p2.do("open a second tab", chromedp.EmulateViewport(820, 560), chromedp.Navigate(base))
	p.do("reload", chromedp.Reload())
	p.wait("the growing answer after the reload", `[...document.querySelectorAll('.agent .answer')].some(e => e.textContent.length > 0)`, 10*time.Second)
	p.shot("reloaded-mid-answer")
	for i, pg := range []*browserPage{p, p2} {
		pg.wait("the whole answer", `!!document.querySelector('.agent[data-final="1"]')`, 20*time.Second)
		bs := pg.state()
		if len(bs) != 2 || bs[0].Who != "me" || bs[0].Text != long || bs[1].Answer != want {
			pg.fail("tab %d after the reload: want my message once and the whole answer once", i+1)
		}
	}
	p.shot("reload-answer-done")
	p2.shot("second-tab")

	// 8. An agent-initiated message (a notify event, written as the worker writes events)
	// shows as an agent message of its own, in both tabs.
	chatID, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem('lettaq.webchat')).chat`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Dev.Redis.XAdd(r.Config.KeyPrefix+"replies:web:"+chatID, "*", []string{"type", "notify", "task_id", "notify:k1",
		"otid", "", "run_id", "", "message_id", "k1", "seq", "1", "time", time.Now().UTC().Format(time.RFC3339Nano),
		"data", `{"text":"A reminder from your agent."}`}); err != nil {
		t.Fatal(err)
	}
	for _, pg := range []*browserPage{p, p2} {
		pg.wait("the agent's own message", `[...document.querySelectorAll('.agent.notify')].map(e => e.textContent).join('|') === 'A reminder from your agent.'`, 10*time.Second)
	}
	p.shot("notify")
	if s := jsErrors.String(); s != "" {
		t.Errorf("the page threw:\n%s", s)
	}
	t.Logf("browser test ran %v", time.Since(start).Round(100*time.Millisecond))
}

// writeTestPNG writes a small PNG image to path.
func writeTestPNG(t *testing.T, path string) {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range m.Pix {
		m.Pix[i] = 0x80
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, m); err != nil {
		t.Fatal(err)
	}
}
