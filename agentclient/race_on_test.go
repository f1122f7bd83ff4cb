//go:build race

package agentclient

// raceEnabled: the race detector's sync.Pool drops items at random, so
// allocation counts are not meaningful under it.
const raceEnabled = true
