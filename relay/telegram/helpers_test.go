package telegram_test

import (
	"strconv"

	"github.com/lettaq/lettaq/relay"
)

func relayMsg(text string) relay.Message { return relay.Message{Text: text} }

func relayButtons(text, data string) relay.Message {
	return relay.Message{Text: text, Buttons: []relay.Button{{Label: "Approve", Data: data}}}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
