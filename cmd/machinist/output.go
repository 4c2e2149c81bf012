package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// outputFlag selects text (readable) or json (for scripts) output.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "output format: text or json"}
}

func isJSON(c *cli.Context) bool { return strings.EqualFold(c.String("output"), "json") }

// checkOutput rejects an unknown --output value before anything is done.
func checkOutput(c *cli.Context) error {
	switch strings.ToLower(c.String("output")) {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--output %q: use text or json", c.String("output"))
}

func writeJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
