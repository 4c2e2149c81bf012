package machine

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/mcmmetrics"
)

// healthChecker follows the node of a machine whose VM exists
// (docs/compatibility/mcm-controllers.md#health): it syncs the node, copies its conditions and
// moves the machine's phase by the health table below, then runs the in-place update's node steps
// (inplace.go) and the machine's preservation (preserve.go).
type healthChecker struct {
	*deps
	tokens    *bootstrapTokens
	inPlace   *inPlaceUpdater
	preserver *preserver
}

// nodeHealth is what the machine's node says, as the health table reads it. The values are
// bits, so a rule names a set of them.
type nodeHealth uint8

const (
	// nodeGone: there is no Node object (not registered yet, or gone).
	nodeGone nodeHealth = 1 << iota
	// nodeUnhealthy: the node is not Ready, or one of the problem conditions (--node-conditions,
	// spec.nodeConditions) is not False.
	nodeUnhealthy
	// nodeStarting: healthy, but still tainted node.gardener.cloud/critical-components-not-ready.
	nodeStarting
	// nodeHealthy: healthy and ready for workloads.
	nodeHealthy

	nodeDown    = nodeGone | nodeUnhealthy
	nodeUp      = nodeStarting | nodeHealthy
	anyNodeSays = nodeDown | nodeUp
)

// timer is the state of the timeout that applies to the machine's phase: the creation timeout
// (annotation, spec, flag) while it has not joined, the health timeout while it is Unknown.
// Bits, like nodeHealth.
type timer uint8

const (
	// timerRunning: the timeout has not passed yet.
	timerRunning timer = 1 << iota
	// timerElapsed: it has.
	timerElapsed
	// timerOff: the phase has no timeout, or spec.disableHealthTimeout is set.
	timerOff

	anyTimer = timerRunning | timerElapsed | timerOff
)

// verdict is what a health rule does besides setting the phase: the lastOperation it writes,
// the event it records and when the machine is looked at again.
type verdict uint8

const (
	// stay: nothing changes; look again after LongRetry.
	stay verdict = iota
	// waitJoin: not joined yet; look again at the creation timeout, at the latest after
	// PendingRecheck.
	waitJoin
	// joined: the node is healthy and ready; event Joined.
	joined
	// failedToJoin: the creation timeout passed before the node was healthy and ready; event
	// Failed.
	failedToJoin
	// unhealthy: the health timeout starts; event Unhealthy.
	unhealthy
	// waitHealthy: still unhealthy; look again when the health timeout passes.
	waitHealthy
	// healthTimedOut: the health timeout passed; event Failed. Guarded: the machine is re-read
	// from the API server (still Unknown since the same time, else a stale cache is waited out)
	// and a failure must fit the MachineDeployment's replacement limit (else the machine stays
	// Unknown, with lastOperation saying why).
	healthTimedOut
	// recovered: the node is healthy again; event Recovered.
	recovered
	// rejoined: the node is healthy after an in-place update; event Rejoined.
	rejoined
)

// healthRule is one row of the health table: a machine in one of the phases from, whose node
// says one of node and whose timeout is in one of timer, goes to phase to ("" keeps the phase),
// recording event (a reason, "" none) and doing what its verdict says.
type healthRule struct {
	from    []v1alpha1.MachinePhase
	node    nodeHealth
	timer   timer
	to      v1alpha1.MachinePhase
	event   string
	verdict verdict
}

// notJoined are the phases of a machine whose VM exists and whose node has not joined yet:
// Pending, Available (there was no target cluster when it was created) and none yet (an adopted
// VM).
var notJoined = []v1alpha1.MachinePhase{"", v1alpha1.MachinePending, v1alpha1.MachineAvailable}

// healthTable is the health check as data (documented in docs/machine-controller.md, checked for
// completeness by TestHealthTableIsComplete). Exactly one rule matches each phase the check runs
// on, each state of the node and each state of the timer. A Failed machine gets here only
// while it is preserved (others wait for their MachineSet), the in-place update phases follow
// the agent on the node instead (inplace.go).
var healthTable = []healthRule{
	{notJoined, nodeHealthy, anyTimer, v1alpha1.MachineRunning, "Joined", joined},
	{notJoined, nodeDown | nodeStarting, timerRunning | timerOff, "", "", waitJoin},
	{notJoined, nodeDown | nodeStarting, timerElapsed, v1alpha1.MachineFailed, "Failed", failedToJoin},

	{onlyPhase(v1alpha1.MachineRunning), nodeUp, anyTimer, "", "", stay},
	{onlyPhase(v1alpha1.MachineRunning), nodeDown, anyTimer, v1alpha1.MachineUnknown, "Unhealthy", unhealthy},

	{onlyPhase(v1alpha1.MachineUnknown), nodeUp, anyTimer, v1alpha1.MachineRunning, "Recovered", recovered},
	{onlyPhase(v1alpha1.MachineUnknown), nodeDown, timerRunning, "", "", waitHealthy},
	{onlyPhase(v1alpha1.MachineUnknown), nodeDown, timerOff, "", "", stay},
	{onlyPhase(v1alpha1.MachineUnknown), nodeDown, timerElapsed, v1alpha1.MachineFailed, "Failed", healthTimedOut},

	{onlyPhase(v1alpha1.MachineInPlaceUpdateSuccessful), nodeUp, anyTimer, v1alpha1.MachineRunning, "Rejoined", rejoined},
	{onlyPhase(v1alpha1.MachineInPlaceUpdateSuccessful), nodeDown, anyTimer, "", "", stay},

	// MCM moves any non-Running machine with a healthy node to Running; a preserved Failed
	// machine's VM is kept, so its node may recover.
	{onlyPhase(v1alpha1.MachineFailed), nodeUp, anyTimer, v1alpha1.MachineRunning, "Recovered", recovered},
	{onlyPhase(v1alpha1.MachineFailed), nodeDown, anyTimer, "", "", stay},
}

func onlyPhase(p ...v1alpha1.MachinePhase) []v1alpha1.MachinePhase { return p }

// healthRuleFor returns the rule for a machine in phase whose node says node and whose timeout
// is in state t. A phase the table does not know (none reaches it) stays as it is.
func healthRuleFor(phase v1alpha1.MachinePhase, node nodeHealth, t timer) healthRule {
	for _, r := range healthTable {
		if r.node&node != 0 && r.timer&t != 0 && phaseIn(phase, r.from) {
			return r
		}
	}
	return healthRule{verdict: stay}
}

func phaseIn(p v1alpha1.MachinePhase, list []v1alpha1.MachinePhase) bool {
	for _, q := range list {
		if p == q {
			return true
		}
	}
	return false
}

// reconcile runs the health check of a machine whose VM exists.
func (h *healthChecker) reconcile(ctx context.Context, m *v1alpha1.Machine) (reconcile.Result, error) {
	longRetry := reconcile.Result{RequeueAfter: h.opts.LongRetry}
	switch phase := m.Status.CurrentStatus.Phase; {
	case h.target == nil:
		return h.preserver.after(ctx, m, nil, false, longRetry)
	case phase == v1alpha1.MachineFailed && m.Status.CurrentStatus.PreserveExpiryTime == nil:
		// Failed machines wait for their MachineSet (unless preserved).
		return h.preserver.after(ctx, m, nil, false, longRetry)
	case phase == v1alpha1.MachineInPlaceUpdating, phase == v1alpha1.MachineInPlaceUpdateFailed:
		// Health is undefined during an in-place update (inplace.go).
		res, err := h.inPlace.reconcilePhase(ctx, m)
		if err != nil {
			return res, err
		}
		return h.preserver.after(ctx, m, nil, false, res)
	}
	return h.reconcileFrom(ctx, m, m.Status, nil)
}

// healthPass is what one pass of the health check decided, before anything is written.
type healthPass struct {
	status v1alpha1.MachineStatus
	rule   healthRule
	node   *corev1.Node
	res    reconcile.Result
	// done: the pass stopped early (with err, or with res alone); it ends once status, then the
	// base it started from, is written.
	done bool
	err  error
}

// reconcileFrom runs the health check starting from base, the machine's status or the
// creation's Pending not written yet (written is then non-nil): so a machine whose node is
// healthy already goes from creation to Running in one status update. The status is written
// once, after the pass, whatever the pass decided — when it stopped early (the node could not
// be read or synced), base is written. written runs once that write succeeded, before the
// transition's event: a reconcile of a stale machine fails the write and must not report the
// transition a second time.
func (h *healthChecker) reconcileFrom(ctx context.Context, m *v1alpha1.Machine, base v1alpha1.MachineStatus, written func()) (reconcile.Result, error) {
	p := h.check(ctx, m, base)
	if err := h.writeStatus(ctx, m, p.status); err != nil {
		h.limiter.unmark(m)
		if p.err != nil {
			return reconcile.Result{}, p.err
		}
		return requeueOnConflict(err)
	}
	if written != nil {
		written()
	}
	if p.done {
		return p.res, p.err
	}
	if p.rule.event != "" {
		eventType := corev1.EventTypeNormal
		if p.rule.to == v1alpha1.MachineFailed || p.rule.to == v1alpha1.MachineUnknown {
			eventType = corev1.EventTypeWarning
		}
		if p.rule.verdict == failedToJoin {
			mcmmetrics.MachineFailedToJoin(m)
		}
		h.event(m, eventType, p.rule.event, "HealthCheck", p.status.LastOperation.Description)
	}
	res := p.res
	if p.node != nil && m.Status.CurrentStatus.Phase != v1alpha1.MachineFailed {
		var err error
		if res, err = h.inPlace.step(ctx, m, p.node, res); err != nil {
			return res, err
		}
	}
	return h.preserver.after(ctx, m, p.node, true, res)
}

// check reads and syncs the node, finds the rule of the health table that applies and prepares
// the status it leads to. It writes no status.
func (h *healthChecker) check(ctx context.Context, m *v1alpha1.Machine, base v1alpha1.MachineStatus) healthPass {
	stopped := func(s *earlyEnd) healthPass {
		return healthPass{status: base, res: s.res, err: s.err, done: true}
	}
	node, stop := h.syncedNode(ctx, m)
	if stop != nil {
		return stopped(stop)
	}
	now := h.now()
	st := base.DeepCopy()
	if node != nil && !equality.Semantic.DeepEqual(withoutHeartbeats(node.Status.Conditions), withoutHeartbeats(st.Conditions)) {
		st.Conditions = node.Status.Conditions
	}
	seen := observation{node: node, problems: h.opts.nodeConditions(m), now: now}
	seen.health = healthOf(node, seen.problems)
	t, left := h.timerOf(m, base.CurrentStatus.Phase, now)
	seen.left = left
	p := healthPass{rule: healthRuleFor(base.CurrentStatus.Phase, seen.health, t), node: node, res: reconcile.Result{RequeueAfter: h.opts.LongRetry}}
	if stop := h.describe(ctx, m, &p, st, seen); stop != nil {
		return stopped(stop)
	}
	if to := p.rule.to; to != "" {
		st.CurrentStatus.Phase = to
		st.CurrentStatus.TimeoutActive = to == v1alpha1.MachineUnknown
	}
	p.status = *st
	return p
}

// observation is what a pass saw of the machine's node.
type observation struct {
	node     *corev1.Node // nil: none registered
	problems []string     // the node condition types that make it unhealthy
	health   nodeHealth
	now      time.Time
	left     time.Duration // until the machine's timeout passes
}

// describe sets the pass's last operation and requeue for the rule's verdict; the joined and
// timed-out verdicts have steps of their own (joined, timedOut).
func (h *healthChecker) describe(ctx context.Context, m *v1alpha1.Machine, p *healthPass, st *v1alpha1.MachineStatus, seen observation) *earlyEnd {
	switch p.rule.verdict {
	case waitJoin:
		p.res.RequeueAfter = min(clampRequeue(seen.left+time.Second, h.opts.LongRetry), h.opts.PendingRecheck)
	case joined:
		return h.joined(ctx, m, st, seen.now)
	case failedToJoin:
		why := "its node did not become healthy"
		if seen.node == nil {
			why = "its node did not register"
		} else if seen.health == nodeStarting {
			why = "its node kept the " + v1alpha1.TaintCriticalComponentsNotReady + " taint"
		}
		st.LastOperation = v1alpha1.LastOperation{
			Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateFailed,
			Description: fmt.Sprintf("Machine %s failed to join the cluster in %s: %s", m.Name, h.opts.creationTimeout(m), why),
		}
	case unhealthy:
		st.LastOperation = v1alpha1.LastOperation{
			Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateProcessing,
			Description: fmt.Sprintf("Machine %s is unhealthy - changing MachineState to Unknown. %s", m.Name, unhealthyReason(seen.node, seen.problems)),
		}
		p.res.RequeueAfter = clampRequeue(h.opts.healthTimeout(m)+time.Second, h.opts.LongRetry)
	case waitHealthy:
		p.res.RequeueAfter = clampRequeue(seen.left+time.Second, h.opts.LongRetry)
	case healthTimedOut:
		return h.timedOut(ctx, m, p, st, seen)
	case recovered:
		st.LastOperation = healthy(fmt.Sprintf("Machine %s has re-joined the cluster", m.Name))
	case rejoined:
		st.LastOperation = healthy(fmt.Sprintf("Machine %s successfully re-joined the cluster", m.Name))
	}
	return nil
}

// joined records how long the machine took to join and deletes its bootstrap token.
func (h *healthChecker) joined(ctx context.Context, m *v1alpha1.Machine, st *v1alpha1.MachineStatus, now time.Time) *earlyEnd {
	took := now.Sub(m.CreationTimestamp.Time).Round(time.Second)
	// First the optimistic write: a reconcile of a stale machine (already Running) stops at its
	// conflict, before any other request or a second Joined event.
	if err := h.setJoinDuration(ctx, m, took); err != nil {
		res, err := requeueOnConflict(err)
		return &earlyEnd{res: res, err: err}
	}
	if err := h.tokens.delete(ctx, m); err != nil {
		return &earlyEnd{err: err}
	}
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationCreate, State: v1alpha1.MachineStateSuccessful,
		Description: fmt.Sprintf("Machine %s successfully joined the cluster in %s", m.Name, took),
	}
	return nil
}

// timedOut fails a machine Unknown past its health timeout, unless the cache was stale or the
// replacement rate limit holds it (then it stays Unknown and is checked again soon).
func (h *healthChecker) timedOut(ctx context.Context, m *v1alpha1.Machine, p *healthPass, st *v1alpha1.MachineStatus, seen observation) *earlyEnd {
	unknownFor := since(seen.now, m.Status.CurrentStatus.LastUpdateTime).Round(time.Second)
	if !h.stillUnknownSince(ctx, m) {
		// The cache was stale (e.g. the safety controller just reset the machine); the update
		// brings it back.
		p.rule, p.res.RequeueAfter = healthRule{verdict: stay}, h.opts.ShortRetry
		return nil
	}
	ok, why, err := h.limiter.mayFail(ctx, h.client, m, h.opts.MaxReplacements, seen.now)
	if err != nil {
		return &earlyEnd{err: err}
	}
	if !ok {
		st.LastOperation = v1alpha1.LastOperation{
			Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateProcessing,
			Description: fmt.Sprintf("Machine %s health checks failing since %s; it couldn't be marked FAILED, other machines are getting replaced (%s)", m.Name, unknownFor, why),
		}
		p.rule, p.res.RequeueAfter = healthRule{verdict: stay}, h.opts.ShortRetry
		return nil
	}
	st.LastOperation = v1alpha1.LastOperation{
		Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateFailed,
		Description: fmt.Sprintf("Machine %s health checks failing for %s (timeout %s). Changing status to Failed. %s", m.Name, unknownFor, h.opts.healthTimeout(m), unhealthyReason(seen.node, seen.problems)),
	}
	return nil
}

// timerOf is the state of the machine's timeout in phase, and the time left until it passes.
func (h *healthChecker) timerOf(m *v1alpha1.Machine, phase v1alpha1.MachinePhase, now time.Time) (timer, time.Duration) {
	var left time.Duration
	switch {
	case phaseIn(phase, notJoined):
		left = m.CreationTimestamp.Add(h.opts.creationTimeout(m)).Sub(now)
	case phase == v1alpha1.MachineUnknown && !healthTimeoutDisabled(m):
		left = h.opts.healthTimeout(m) - since(now, m.Status.CurrentStatus.LastUpdateTime)
	default:
		return timerOff, 0
	}
	if left < 0 {
		return timerElapsed, 0
	}
	return timerRunning, left
}

// healthOf is what the node says: gone, unhealthy (MCM's rule, isHealthy), or healthy and
// still starting or ready.
func healthOf(node *corev1.Node, problemTypes []string) nodeHealth {
	switch {
	case node == nil:
		return nodeGone
	case !isHealthy(node.Status.Conditions, problemTypes):
		return nodeUnhealthy
	case hasTaint(node, v1alpha1.TaintCriticalComponentsNotReady):
		return nodeStarting
	}
	return nodeHealthy
}

// healthy is the lastOperation of a machine whose node is healthy again (after Unknown, a
// preserved failure or an in-place update).
func healthy(description string) v1alpha1.LastOperation {
	return v1alpha1.LastOperation{Type: v1alpha1.MachineOperationHealthCheck, State: v1alpha1.MachineStateSuccessful, Description: description}
}

// stillUnknownSince confirms with the API server, right before the irreversible Unknown →
// Failed, that the machine is still Unknown since the same time: a machine the safety controller
// reset after an API-server outage must not be failed from a stale cache.
func (h *healthChecker) stillUnknownSince(ctx context.Context, m *v1alpha1.Machine) bool {
	live := &v1alpha1.Machine{}
	if err := h.apiReader.Get(ctx, client.ObjectKeyFromObject(m), live); err != nil {
		return false
	}
	return live.Status.CurrentStatus.Phase == v1alpha1.MachineUnknown &&
		live.Status.CurrentStatus.LastUpdateTime.Equal(&m.Status.CurrentStatus.LastUpdateTime)
}

// setJoinDuration records how long the machine took to join, with an optimistic lock: it is the
// first write of the Pending → Running transition, so a stale cached machine fails here.
func (h *healthChecker) setJoinDuration(ctx context.Context, m *v1alpha1.Machine, d time.Duration) error {
	if m.Annotations[v1alpha1.AnnotationMachineJoinDuration] != "" {
		return nil
	}
	orig := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[v1alpha1.AnnotationMachineJoinDuration] = d.String()
	if err := h.client.Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return err
	}
	mcmmetrics.MachineJoined(m, d)
	return nil
}

// isHealthy is MCM's rule: the node reports conditions, Ready is True, and none of the
// configured problem conditions is anything but False.
func isHealthy(conds []corev1.NodeCondition, problemTypes []string) bool {
	if len(conds) == 0 {
		return false
	}
	ready := false
	for _, c := range conds {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			continue
		}
		for _, t := range problemTypes {
			if string(c.Type) == t && c.Status != corev1.ConditionFalse {
				return false
			}
		}
	}
	return ready
}

func unhealthyReason(node *corev1.Node, problemTypes []string) string {
	if node == nil {
		return "Node object went missing."
	}
	var parts []string
	for _, c := range node.Status.Conditions {
		bad := c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue
		for _, t := range problemTypes {
			if string(c.Type) == t && c.Status != corev1.ConditionFalse {
				bad = true
			}
		}
		if bad {
			parts = append(parts, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
	}
	if len(parts) == 0 {
		return "Node reports no conditions."
	}
	return "Node conditions: " + strings.Join(parts, ", ") + "."
}

// withoutHeartbeats drops the heartbeat times, which change on every kubelet report, so
// conditions are copied to the machine only when they say something new.
func withoutHeartbeats(conds []corev1.NodeCondition) []corev1.NodeCondition {
	out := make([]corev1.NodeCondition, len(conds))
	for i, c := range conds {
		c.LastHeartbeatTime = metav1Zero
		out[i] = c
	}
	return out
}

func hasTaint(node *corev1.Node, key string) bool {
	if node == nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
