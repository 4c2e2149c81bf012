package v1alpha1

// Cluster Autoscaler's scale-down-disabled mark on a node, as MCM and machinist put it during a
// rollout or a preservation: AnnotationCAScaleDownDisabled "true" plus the record that a
// controller set it (AnnotationCAScaleDownDisabledByMCM, or machinist's old key). A node marked
// by hand (an operator, Cluster Autoscaler itself) has no record and is never unmarked by a controller.

// ScaleDownDisabledByController reports whether a controller marked the node: MCM's record key
// or machinist's legacy one is present (MCM checks presence, not the value).
func ScaleDownDisabledByController(annotations map[string]string) bool {
	_, mcm := annotations[AnnotationCAScaleDownDisabledByMCM]
	_, legacy := annotations[LegacyAnnotationCAScaleDownDisabledByMCM]
	return mcm || legacy
}

// ScaleDownDisabledByHand reports whether the node carries the scale-down-disabled annotation
// without a controller's record: someone else set it, and it must be left alone.
func ScaleDownDisabledByHand(annotations map[string]string) bool {
	_, set := annotations[AnnotationCAScaleDownDisabled]
	return set && !ScaleDownDisabledByController(annotations)
}

// MarkScaleDownDisabled sets the mark with MCM's keys (dropping machinist's legacy record),
// unless the node is already kept from scale-down by hand ("true" without a record), which is
// left as it is. As in MCM, any other value is overwritten. It reports whether annotations
// changed; annotations must not be nil.
func MarkScaleDownDisabled(annotations map[string]string) bool {
	if annotations[AnnotationCAScaleDownDisabled] == "true" && !ScaleDownDisabledByController(annotations) {
		return false
	}
	_, legacy := annotations[LegacyAnnotationCAScaleDownDisabledByMCM]
	changed := legacy || annotations[AnnotationCAScaleDownDisabled] != "true" || annotations[AnnotationCAScaleDownDisabledByMCM] != "true"
	delete(annotations, LegacyAnnotationCAScaleDownDisabledByMCM)
	annotations[AnnotationCAScaleDownDisabled] = "true"
	annotations[AnnotationCAScaleDownDisabledByMCM] = "true"
	return changed
}

// UnmarkScaleDownDisabled removes a controller's mark (MCM's or machinist's, either record key)
// and leaves a mark set by hand alone. It reports whether annotations changed.
func UnmarkScaleDownDisabled(annotations map[string]string) bool {
	if !ScaleDownDisabledByController(annotations) {
		return false
	}
	delete(annotations, AnnotationCAScaleDownDisabled)
	delete(annotations, AnnotationCAScaleDownDisabledByMCM)
	delete(annotations, LegacyAnnotationCAScaleDownDisabledByMCM)
	return true
}
