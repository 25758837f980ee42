package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A run's reconcile passes per pod are the difference of the managers'
// controller_runtime_reconcile_total by controller, over every result.
func TestPassesPerPodByController(t *testing.T) {
	scrape := func(proxy, feedback float64) snapshot {
		text := "# TYPE controller_runtime_reconcile_total counter\n" +
			`controller_runtime_reconcile_total{controller="proxy",result="success"} ` + strconv.FormatFloat(proxy, 'f', -1, 64) + "\n" +
			`controller_runtime_reconcile_total{controller="proxy",result="requeue_after"} 10` + "\n" +
			`controller_runtime_reconcile_total{controller="feedback",result="success"} ` + strconv.FormatFloat(feedback, 'f', -1, 64) + "\n"
		return snapshot{passes: passes(parse(strings.NewReader(text)))}
	}
	before, after := scrape(100, 50), scrape(400, 250)
	c := costOf(before, after, 100)
	assert.Equal(t, map[string]float64{"proxy": 3, "feedback": 2}, c.Passes)
	assert.Equal(t, map[string]float64{"proxy": 3, "feedback": 2}, averageOf([]benchRun{{Fleetlet: measured{cost: c}}}, true, func(m measured) cost { return m.cost }).Passes)
}
