package machinetest

import corev1 "k8s.io/api/core/v1"

// NodeReady reports whether the node's Ready condition is True, as a kubelet last posted it.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
