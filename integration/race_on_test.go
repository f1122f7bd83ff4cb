//go:build race

package integration

// raceDetector reports whether the tests run under the race detector.
const raceDetector = true
