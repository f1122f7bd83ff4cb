package telegram

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/go-telegram/bot/models"
)

// SecretHeader carries the webhook's secret token on each delivery.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// Webhook serves Telegram's deliveries (setWebhook with secret_token
// Secret): a request without the secret is refused (403); an update is
// answered 200 once Inbound took it, 500 when it could not (Telegram
// delivers it again). The library's own handler answers 200 before the
// update is taken, which could lose it.
type Webhook struct {
	In     *Inbound
	Secret string
	Logger *slog.Logger
}

func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get(SecretHeader)
	if h.Secret == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.Secret)) != 1 {
		http.Error(w, "bad or missing "+SecretHeader, http.StatusForbidden)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read error", http.StatusBadRequest)
		return
	}
	var u models.Update
	if err := json.Unmarshal(body, &u); err != nil {
		// No delivery again makes it readable.
		h.log().Warn("telegram: webhook: undecodable update; dropped", "err", err)
		return
	}
	if err := h.In.Handle(r.Context(), &u); err != nil {
		h.log().Warn("telegram: webhook: update not taken; Telegram will deliver it again", "update_id", u.ID, "err", err)
		http.Error(w, "not taken, try again", http.StatusInternalServerError)
		return
	}
}

func (h *Webhook) log() *slog.Logger {
	if h.Logger == nil {
		return slog.Default()
	}
	return h.Logger
}
