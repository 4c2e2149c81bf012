package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// compareSizes builds the all-in-one, each slim binary and each provider-half binary as
// build/docker/image.sh does (static, -trimpath, stripped), prints their sizes and reports
// whether every slim binary is at most maxPercent and every provider half at most
// maxHalfPercent of the all-in-one.
func compareSizes(providers, extra []string, maxPercent, maxHalfPercent float64) bool {
	dir, err := os.MkdirTemp("", "checkslim-sizes")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	all, err := buildStripped(dir, "machinist", extra)
	if err != nil {
		fail(err)
	}
	fmt.Printf("\nstripped static binaries (CGO_ENABLED=0 go build -trimpath -ldflags '-s -w'):\n")
	fmt.Printf("  %-28s %11d bytes %6.1f MB\n", "machinist", all, mb(all))
	ok := true
	for _, p := range providers {
		for _, b := range []struct {
			name string
			tags []string
			max  float64
		}{
			{"machinist-" + p, []string{"slim", "provider_" + p}, maxPercent},
			{"machine-controller-" + p, []string{"slim", "machinecontroller", "provider_" + p}, maxHalfPercent},
		} {
			size, err := buildStripped(dir, b.name, append(b.tags, extra...))
			if err != nil {
				fail(err)
			}
			pct := 100 * float64(size) / float64(all)
			verdict := fmt.Sprintf("ok (at most %.0f%%)", b.max)
			if pct > b.max {
				verdict = fmt.Sprintf("FAIL: over %.0f%%", b.max)
				ok = false
			}
			fmt.Printf("  %-28s %11d bytes %6.1f MB %5.1f%% of machinist  %s\n", b.name, size, mb(size), pct, verdict)
		}
	}
	return ok
}

func buildStripped(dir, name string, tags []string) (int64, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/machinist")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
