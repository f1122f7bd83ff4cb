package slack

import (
	"context"
	"net/http"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// RunSocketMode takes Slack's requests over Socket Mode instead of HTTP:
// the app connects out (apps.connections.open with the app-level token,
// xapp-…, then a websocket) and needs no public request URL. api is the
// client with that token (slack.OptionAppLevelToken). Each request is
// handled as its HTTP twin (handleEvent, handleInteraction, handleCommand)
// and acknowledged by its envelope id: an event only once its message is
// enqueued, so that Slack delivers an event whose enqueue failed again, as
// it does after a 500 over HTTP. It returns when ctx ends (nil), or the
// connection's error; slack-go reconnects by itself meanwhile.
func (in *Inbound) RunSocketMode(ctx context.Context, api *slack.Client) error {
	c := socketmode.New(api)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.RunContext(ctx) }()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case ev := <-c.Events:
			in.socketRequest(ctx, c, ev)
		}
	}
}

// socketRequest handles one Socket Mode event.
func (in *Inbound) socketRequest(ctx context.Context, c *socketmode.Client, ev socketmode.Event) {
	switch ev.Type {
	case socketmode.EventTypeEventsAPI:
		code, _ := in.handleEvent(ctx, ev.Request.Payload)
		if code == http.StatusInternalServerError {
			return // not acknowledged: Slack delivers it again
		}
		in.ack(ctx, c, ev.Request, nil)
	case socketmode.EventTypeInteractive:
		in.ack(ctx, c, ev.Request, nil)
		if ic, ok := ev.Data.(slack.InteractionCallback); ok {
			in.handleInteraction(ctx, ic)
		}
	case socketmode.EventTypeSlashCommand:
		cmd, _ := ev.Data.(slack.SlashCommand)
		in.ack(ctx, c, ev.Request, in.handleCommand(ctx, cmd.ChannelID, cmd.UserID))
	case socketmode.EventTypeConnected:
		in.log().Info("slack: Socket Mode connected")
	case socketmode.EventTypeConnectionError, socketmode.EventTypeIncomingError, socketmode.EventTypeInvalidAuth:
		in.log().Warn("slack: Socket Mode", "event", string(ev.Type), "err", ev.Data)
	}
}

func (in *Inbound) ack(ctx context.Context, c *socketmode.Client, req *socketmode.Request, payload any) {
	if req == nil {
		return
	}
	if err := c.AckCtx(ctx, req.EnvelopeID, payload); err != nil {
		in.log().Warn("slack: Socket Mode acknowledgement not sent", "envelope", req.EnvelopeID, "err", err)
	}
}
