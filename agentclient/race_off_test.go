//go:build !race

package agentclient

const raceEnabled = false
