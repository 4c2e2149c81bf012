//go:build !race

package machinistbin

const raceEnabled = false
