package telegram

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-telegram/bot/models"
	"github.com/redis/go-redis/v9"
)

// Poller takes updates by getUpdates long polling. Its offset (the next
// update id wanted) is kept in Redis and moved past an update only once
// Inbound took it: a restart neither loses an update (Telegram keeps what
// is not confirmed, 24 h) nor makes a second task of one (an update taken
// again is the same message id, one task). One replica polls at a time: it
// holds a lease in Redis (Telegram refuses two concurrent getUpdates).
type Poller struct {
	A       *Adapter
	In      *Inbound
	Redis   redis.UniversalClient
	Key     string        // the offset's key; the lease is Key+":lease"
	Timeout time.Duration // long-poll wait (default 25s)
	Logger  *slog.Logger
}

// renewLease extends the lease if this holder still has it.
var renewLease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)

// Run polls until ctx ends.
func (p *Poller) Run(ctx context.Context) error {
	if p.Timeout <= 0 {
		p.Timeout = 25 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	me := hex.EncodeToString(tok)
	lease := p.Key + ":lease"
	ttl := p.Timeout + 15*time.Second
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
		}
		ok, err := p.Redis.SetNX(ctx, lease, me, ttl).Result()
		if err == nil && !ok {
			n, rerr := renewLease.Run(ctx, p.Redis, []string{lease}, me, ttl.Milliseconds()).Int()
			ok, err = n == 1, rerr
		}
		if err != nil || !ok {
			if err != nil && ctx.Err() == nil {
				p.Logger.Warn("telegram: poll lease", "err", err)
			}
			backoff = time.Second // another replica polls
			continue
		}
		if err := p.once(ctx); err != nil && ctx.Err() == nil {
			p.Logger.Warn("telegram: getUpdates", "err", err)
			backoff = min(max(2*backoff, 200*time.Millisecond), 5*time.Second)
			var rl *rateLimited
			if errors.As(err, &rl) {
				backoff = rl.after
			}
			continue
		}
		backoff = 0
	}
	// Give the lease up: another replica polls at once.
	_ = p.Redis.Eval(context.Background(), `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`, []string{lease}, me).Err()
	return nil
}

type rateLimited struct{ after time.Duration }

func (e *rateLimited) Error() string { return fmt.Sprintf("rate limited, retry after %v", e.after) }

// once makes one getUpdates call and takes its updates in order.
func (p *Poller) once(ctx context.Context) error {
	offset, err := p.Redis.Get(ctx, p.Key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	body, _ := json.Marshal(map[string]any{"offset": offset, "timeout": int(p.Timeout / time.Second),
		"allowed_updates": []string{"message", "callback_query"}})
	u := p.A.cfg.ServerURL + "/bot" + p.A.cfg.Token + "/getUpdates"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad Bot API URL")
	}
	req.Header.Set("Content-Type", "application/json")
	client := *p.A.cfg.HTTPClient
	client.Timeout = p.Timeout + 10*time.Second
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds the token
		}
		return err
	}
	defer resp.Body.Close()
	var r struct {
		OK          bool             `json:"ok"`
		Result      []*models.Update `json:"result"`
		ErrorCode   int              `json:"error_code"`
		Description string           `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("status %d, undecodable answer", resp.StatusCode)
	}
	if !r.OK {
		if r.ErrorCode == http.StatusTooManyRequests {
			return &rateLimited{time.Duration(max(r.Parameters.RetryAfter, 1)) * time.Second}
		}
		return fmt.Errorf("%d %s", r.ErrorCode, r.Description)
	}
	for _, upd := range r.Result {
		if err := p.In.Handle(ctx, upd); err != nil {
			return fmt.Errorf("update %d not taken: %w", upd.ID, err)
		}
		// Forward only: a slower replica that lost its lease cannot move
		// the offset back.
		if err := p.Redis.Eval(ctx, `local v = tonumber(redis.call("GET", KEYS[1]) or "0") if tonumber(ARGV[1]) > v then redis.call("SET", KEYS[1], ARGV[1]) end return 0`,
			[]string{p.Key}, strconv.FormatInt(upd.ID+1, 10)).Err(); err != nil {
			return err
		}
	}
	return nil
}
