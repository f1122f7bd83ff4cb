//go:build race

package lettasim_test

const raceEnabled = true
