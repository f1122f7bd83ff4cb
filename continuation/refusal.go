package continuation

import (
	"context"
	"log/slog"

	"github.com/lettaq/lettaq/agentclient"
)

// This file holds what a send makes of Letta Cloud's refusals (WIRE.md,
// "Errors Letta Cloud returns today"): a deploy's 503 and Letta's own API
// rate limit (429) say nothing was stored, so the turn is Refused (sent
// again after Retry-After, no search); a quota or credits 429/402 ends the
// turn, naming the cause in the user's words. A model rate limit (429
// llm_rate_limit) is left to the search (sent, whose gate then backs off).

// refusal decides a send refused by one of these answers; handled is false
// for any other error.
func (r *Runner) refusal(ctx context.Context, t Turn, h Hooks, err error) (d Result, handled bool) {
	kind := agentclient.RefusalOf(err)
	log := r.logFor(h)
	switch kind {
	case agentclient.RefusalDeploy, agentclient.RefusalRateLimit:
		p := ActivityRateLimited
		if kind == agentclient.RefusalDeploy {
			p = ActivityLettaDeploying
		}
		announce(h, p)
		log.LogAttrs(ctx, slog.LevelWarn, "send refused, not admitted (the server said so): sending again after Retry-After",
			slog.String("otid", t.Otid), slog.String("run_id", ""), slog.String("refusal", kind.String()),
			slog.Duration("retry_after", agentclient.RetryAfter(err)), slog.String("error", err.Error()))
		return Result{Outcome: Refused, Err: err, Sends: 1, Evidence: EvidenceNone, Retryable: true,
			Reason: "not admitted (the server said so): " + err.Error()}, true
	case agentclient.RefusalQuota:
		cause := agentclient.QuotaCause(err)
		log.LogAttrs(ctx, slog.LevelWarn, "send refused by an account limit", slog.String("otid", t.Otid),
			slog.String("run_id", ""), slog.String("cause", cause), slog.String("error", err.Error()))
		return Result{Outcome: Rejected, Err: err, Sends: 1, Evidence: EvidenceNone, Retryable: false,
			Reason: cause + " (" + err.Error() + ")"}, true
	case agentclient.RefusalModelRateLimit:
		announce(h, ActivityRateLimited)
	}
	return Result{}, false
}
