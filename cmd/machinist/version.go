package main

import (
	"fmt"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/internal/version"
)

func init() { commands = append(commands, versionCommand()) }

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, revision, Go version and compiled-in providers",
		Flags: []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error {
			info := struct {
				Version   string   `json:"version"`
				Revision  string   `json:"revision"`
				GoVersion string   `json:"goVersion"`
				Platform  string   `json:"platform"`
				Providers []string `json:"providers"`
			}{version.String(), version.RevisionString(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH, registry.Names()}
			if isJSON(c) {
				return writeJSON(c, info)
			}
			_, err := fmt.Fprintf(c.App.Writer, "machinist %s (revision %s, %s, %s)\nproviders: %s\n",
				info.Version, info.Revision, info.GoVersion, info.Platform, joinOrNone(info.Providers))
			return err
		},
	}
}
