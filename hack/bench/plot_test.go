package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
)

// TestRunningOverTime counts the pods done at each finish, from the run's
// first create, in order, whatever the map's order.
func TestRunningOverTime(t *testing.T) {
	begin := time.Unix(1000, 0)
	r := result{begin: begin, finished: map[string]time.Time{
		"c": begin.Add(3 * time.Second), "a": begin.Add(time.Second), "b": begin.Add(1500 * time.Millisecond),
	}}
	got := runningOverTime(r)
	want := plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: 1.5, Y: 2}, {X: 3, Y: 3}}
	require.Len(t, got, len(want), "got %v, want %v", got, want)
	for i := range want {
		require.Equal(t, want[i], got[i], "point %d", i)
	}
}

// TestPlotRunning writes one PNG per mode beside the JSON file, a line
// per run and path of that mode.
func TestPlotRunning(t *testing.T) {
	begin := time.Now()
	done := func(name string, after time.Duration) measured {
		return measured{result: result{name: name, begin: begin, finished: map[string]time.Time{"p-0": begin.Add(after)}}}
	}
	burst := mode{Name: "burst", Pods: 1}
	runs := []benchRun{{Index: 1, Mode: burst, Fleetlet: done("fleetlet", 2*time.Second), Direct: done("direct", time.Second)}}
	file := plotFile(filepath.Join(t.TempDir(), "bench.json"), burst)
	require.Truef(t, strings.HasSuffix(file, "bench-burst.png"), "plot file %s, want bench-burst.png beside bench.json", file)
	require.NoError(t, plotRunning(file, runs, burst))
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "%s is not a PNG", file)
	b := img.Bounds()
	require.Falsef(t, b.Dx() < 400 || b.Dy() < 200, "plot is %v, too small to read", b)
}
