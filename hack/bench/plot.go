package main

import (
	"fmt"
	"image/color"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Colours of the two paths in the plots.
var (
	fleetletColour = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	directColour   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// plotFile is where the plot of a mode goes, beside the JSON results:
// bench.json gives bench-burst.png and bench-paced.png.
func plotFile(out string, md mode) string {
	return strings.TrimSuffix(out, ".json") + "-" + md.Name + ".png"
}

// plotRunning draws the pods Running over time, from each run's first
// create, for both paths of one mode: a line per run and path.
func plotRunning(file string, runs []benchRun, md mode) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %d pods: pods Running since the first create", md, md.Pods)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "pods Running"
	// Bottom right: both curves rise from the bottom left.
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for _, r := range runs {
		if r.Mode != md {
			continue
		}
		for _, m := range []struct {
			measured
			colour color.Color
		}{{r.Fleetlet, fleetletColour}, {r.Direct, directColour}} {
			line, err := plotter.NewLine(runningOverTime(m.result))
			if err != nil {
				return fmt.Errorf("plotting run %d %s: %w", r.Index, m.name, err)
			}
			line.Color = m.colour
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("run %d %s", r.Index, m.name), line)
		}
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, file)
}

// runningOverTime is the count of pods done at each pod's finish, in
// seconds since the run began, starting from zero.
func runningOverTime(r result) plotter.XYs {
	ends := make([]time.Duration, 0, len(r.finished))
	for _, at := range r.finished {
		ends = append(ends, at.Sub(r.begin))
	}
	slices.Sort(ends)
	xy := plotter.XYs{{X: 0, Y: 0}}
	for i, d := range ends {
		xy = append(xy, plotter.XY{X: d.Seconds(), Y: float64(i + 1)})
	}
	return xy
}
