package rediscluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// MasterStats is what one master holds and has served since the last
// ResetStats (or its start).
type MasterStats struct {
	Addr string
	// Keys is DBSIZE.
	Keys int64
	// Calls are INFO commandstats' calls by command ("set", "evalsha",
	// "cluster|nodes"…). Commands a script runs count too, beside the
	// EVAL/EVALSHA/FCALL that ran it.
	Calls map[string]int64
}

// adminCommands are what clients and this package send to learn about the
// cluster, not to use the data: Commands leaves them out.
var adminCommands = map[string]bool{
	"info": true, "dbsize": true, "cluster": true, "config": true, "client": true, "command": true,
	"ping": true, "hello": true, "readonly": true, "readwrite": true, "asking": true, "select": true,
	"auth": true, "replconf": true, "psync": true, "sync": true, "migrate": true, "restore-asking": true,
}

// Commands is the number of commands the master served for clients' data:
// every call in Calls but the cluster's and clients' housekeeping (INFO,
// DBSIZE, CLUSTER …, CONFIG …, CLIENT …, COMMAND …, PING, HELLO, READONLY,
// ASKING, SELECT, AUTH, replication and MIGRATE/RESTORE-ASKING).
func (s MasterStats) Commands() int64 {
	var n int64
	for name, calls := range s.Calls {
		base, _, _ := strings.Cut(name, "|")
		if !adminCommands[base] {
			n += calls
		}
	}
	return n
}

// Stats returns each master's keys and command calls, ordered by address.
func (c *Cluster) Stats(ctx context.Context) ([]MasterStats, error) {
	ms, err := c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MasterStats, 0, len(ms))
	for _, m := range ms {
		s, err := readStats(ctx, m.Addr)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func readStats(ctx context.Context, addr string) (MasterStats, error) {
	rc := node(addr)
	defer rc.Close()
	keys, err := rc.DBSize(ctx).Result()
	if err != nil {
		return MasterStats{}, fmt.Errorf("rediscluster: DBSIZE on %s: %w", addr, err)
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return MasterStats{}, fmt.Errorf("rediscluster: INFO commandstats on %s: %w", addr, err)
	}
	calls, err := ParseCommandStats(info)
	if err != nil {
		return MasterStats{}, fmt.Errorf("rediscluster: INFO commandstats on %s: %w", addr, err)
	}
	return MasterStats{Addr: addr, Keys: keys, Calls: calls}, nil
}

// ParseCommandStats returns the calls by command of an INFO commandstats
// text ("cmdstat_set:calls=3,usec=…" lines).
func ParseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("line %q: %w", line, err)
				}
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls, nil
}

// ResetStats zeroes every running node's command statistics (CONFIG
// RESETSTAT), so that Stats counts from now.
func (c *Cluster) ResetStats(ctx context.Context) error {
	for _, addr := range c.live() {
		rc := node(addr)
		err := rc.ConfigResetStat(ctx).Err()
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("rediscluster: CONFIG RESETSTAT on %s: %w", addr, err)
		}
	}
	return nil
}

// Shares returns each value's share of their sum (0 each when the sum is 0).
func Shares(values []int64) []float64 {
	var sum int64
	for _, v := range values {
		sum += v
	}
	out := make([]float64, len(values))
	if sum == 0 {
		return out
	}
	for i, v := range values {
		out[i] = float64(v) / float64(sum)
	}
	return out
}

// KeyShares returns each master's share of the keys, in stats' order.
func KeyShares(stats []MasterStats) []float64 {
	v := make([]int64, len(stats))
	for i, s := range stats {
		v[i] = s.Keys
	}
	return Shares(v)
}

// CommandShares returns each master's share of the commands (Commands), in
// stats' order.
func CommandShares(stats []MasterStats) []float64 {
	v := make([]int64, len(stats))
	for i, s := range stats {
		v[i] = s.Commands()
	}
	return Shares(v)
}
