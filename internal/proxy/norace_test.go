//go:build !race

package proxy

const raceSlowdown = 1
