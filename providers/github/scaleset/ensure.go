package scaleset

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/actions/scaleset"
)

// API is what Ensure needs of a scale-set client (*scaleset.Client).
type API interface {
	GetRunnerGroupByName(ctx context.Context, name string) (*scaleset.RunnerGroup, error)
	GetRunnerScaleSet(ctx context.Context, runnerGroupID int, name string) (*scaleset.RunnerScaleSet, error)
	GetRunnerScaleSetByID(ctx context.Context, id int) (*scaleset.RunnerScaleSet, error)
	CreateRunnerScaleSet(ctx context.Context, set *scaleset.RunnerScaleSet) (*scaleset.RunnerScaleSet, error)
	UpdateRunnerScaleSet(ctx context.Context, id int, set *scaleset.RunnerScaleSet) (*scaleset.RunnerScaleSet, error)
}

var _ API = (*scaleset.Client)(nil)

// Want is the scale set a pool asks for.
type Want struct {
	// Name is the scale set's name, unique in its runner group; with no
	// Labels it is the one label jobs select it by (runs-on).
	Name string
	// RunnerGroup is the group's name; empty is the default group.
	RunnerGroup string
	// Labels jobs select it by; empty means Name alone.
	Labels []string
	// Known is the ID the pool recorded for its scale set, 0 when none.
	Known int
}

// Outcome says what Ensure did.
type Outcome string

const (
	// Created: no scale set of that name was in the group; one was made.
	Created Outcome = "Created"
	// Updated: the pool's scale set was there with other labels, group or
	// name; it was brought in step.
	Updated Outcome = "Updated"
	// Unchanged: the pool's scale set was there as asked.
	Unchanged Outcome = "Unchanged"
	// Found: a scale set of that name was in the group and the pool had
	// recorded none: someone made it (another installation, a person, this
	// pool before its status was written). Ensure leaves it as it is; the
	// caller decides whether to take it.
	Found Outcome = "Found"
)

// Ensure makes the pool's scale set exist as w asks. The pool's own (w.Known)
// is read by ID and updated when its name, group or labels differ; a pool
// with none gets one created, unless one of that name is already in the
// group (Found: returned untouched, never updated or taken over here).
func Ensure(ctx context.Context, c API, w Want) (*scaleset.RunnerScaleSet, Outcome, error) {
	groupName := w.RunnerGroup
	if groupName == "" {
		groupName = scaleset.DefaultRunnerGroup
	}
	group, err := c.GetRunnerGroupByName(ctx, groupName)
	if err != nil {
		return nil, "", fmt.Errorf("runner group %q: %w", groupName, err)
	}
	labels := wantLabels(w)
	if w.Known != 0 {
		have, err := c.GetRunnerScaleSetByID(ctx, w.Known)
		switch {
		case IsNotFound(err):
			// Deleted outside HyperFleet: made again below.
			have = nil
		case err != nil:
			return nil, "", fmt.Errorf("scale set %d: %w", w.Known, err)
		}
		if have != nil && have.ID == w.Known {
			if have.Name == w.Name && have.RunnerGroupID == group.ID && sameLabels(have.Labels, labels) {
				return have, Unchanged, nil
			}
			set, err := c.UpdateRunnerScaleSet(ctx, have.ID, &scaleset.RunnerScaleSet{
				Name: w.Name, RunnerGroupID: group.ID, Labels: labels, RunnerSetting: have.RunnerSetting,
			})
			if err != nil {
				return nil, "", fmt.Errorf("updating scale set %d: %w", have.ID, err)
			}
			return set, Updated, nil
		}
	}
	existing, err := c.GetRunnerScaleSet(ctx, group.ID, w.Name)
	if err != nil {
		return nil, "", fmt.Errorf("scale set %q in group %q: %w", w.Name, group.Name, err)
	}
	if existing != nil {
		return existing, Found, nil
	}
	set, err := c.CreateRunnerScaleSet(ctx, &scaleset.RunnerScaleSet{
		Name: w.Name, RunnerGroupID: group.ID, Labels: labels,
		// The machine image carries the runner it runs: an update would
		// download another at every start.
		RunnerSetting: scaleset.RunnerSetting{DisableUpdate: true},
	})
	if err != nil {
		return nil, "", fmt.Errorf("creating scale set %q: %w", w.Name, err)
	}
	return set, Created, nil
}

func wantLabels(w Want) []scaleset.Label {
	names := w.Labels
	if len(names) == 0 {
		names = []string{w.Name}
	}
	out := make([]scaleset.Label, 0, len(names))
	for _, n := range names {
		out = append(out, scaleset.Label{Name: n, Type: "System"})
	}
	return out
}

// sameLabels compares label names, in any order and case, as GitHub
// matches them.
func sameLabels(have, want []scaleset.Label) bool {
	norm := func(ls []scaleset.Label) []string {
		out := make([]string, 0, len(ls))
		for _, l := range ls {
			out = append(out, strings.ToLower(l.Name))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(have), norm(want))
}

// IsNotFound reports GitHub's answer for a scale set that does not exist.
// The library wraps it without a sentinel of its own; the exception's name
// is what it keeps.
func IsNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "RunnerScaleSetNotFoundException")
}
