// Package slack is the relay's Slack adapter, on github.com/slack-go/slack.
//
// Outbound (Adapter, a relay.Adapter): a message is chat.postMessage in the
// conversation's thread, its growth chat.update, its removal chat.delete;
// text goes as markdown_text (Slack renders the agent's Markdown), a message
// with buttons as Block Kit (a section and an actions block); the turn's
// status is assistant.threads.setStatus, which Slack clears after two
// minutes or on the app's next reply, so the relay refreshes it. Slack's 429
// becomes a *relay.RateLimitedError with its Retry-After; an API error that
// retrying cannot cure wraps relay.ErrPermanent. The adapter keeps Slack's
// rate limits itself (pace.go), final texts before growing ones, so that
// calls wait for room instead of meeting 429 answers.
//
// Inbound (Inbound, an http.Handler): the Events API (app mentions and
// direct messages become turns), interactivity (approval buttons go to
// relay.Press) and the /stop slash command, every request verified with the
// app's signing secret.
//
// One lettaq conversation per thread: the chat id is "<channel>/<thread
// ts>", or "<channel>" for a direct message written outside a thread (one
// conversation per DM). See docs/slack.md.
package slack
