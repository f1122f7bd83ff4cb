//go:build race

package integration

// raceEnabled: the race detector makes frames bigger (and the runtime's
// stack guard twice as large).
const raceEnabled = true
