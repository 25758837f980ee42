package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A run's reconcile passes per pod are the difference of the managers'
// controller_runtime_reconcile_total by controller, over every result, and
// the elector's by what they found, of fleetlet_elector_passes_total.
func TestPassesPerPodByController(t *testing.T) {
	scrape := func(proxy, feedback float64) snapshot {
		text := "# TYPE controller_runtime_reconcile_total counter\n" +
			`controller_runtime_reconcile_total{controller="proxy",result="success"} ` + strconv.FormatFloat(proxy, 'f', -1, 64) + "\n" +
			`controller_runtime_reconcile_total{controller="proxy",result="requeue_after"} 10` + "\n" +
			`controller_runtime_reconcile_total{controller="feedback",result="success"} ` + strconv.FormatFloat(feedback, 'f', -1, 64) + "\n"
		text += "# TYPE fleetlet_elector_passes_total counter\n" +
			`fleetlet_elector_passes_total{found="Electing"} ` + strconv.FormatFloat(proxy/2, 'f', -1, 64) + "\n" +
			`fleetlet_elector_passes_total{found="Ungated"} ` + strconv.FormatFloat(proxy/2, 'f', -1, 64) + "\n"
		fams := parse(strings.NewReader(text))
		return snapshot{passes: passes(fams), found: byLabel(fams, "fleetlet_elector_passes_total", "found")}
	}
	before, after := scrape(100, 50), scrape(400, 250)
	c := costOf(before, after, 100)
	assert.Equal(t, map[string]float64{"proxy": 3, "feedback": 2}, c.Passes)
	assert.Equal(t, map[string]float64{"Electing": 1.5, "Ungated": 1.5}, c.Found)
	assert.Equal(t, map[string]float64{"proxy": 3, "feedback": 2}, averageOf([]benchRun{{Fleetlet: measured{cost: c}}}, true, func(m measured) cost { return m.cost }).Passes)
}
