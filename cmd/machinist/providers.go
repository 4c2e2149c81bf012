package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/machinist-io/machinist/core/registry"
)

func init() { commands = append(commands, providersCommand()) }

func providersCommand() *cli.Command {
	return &cli.Command{
		Name:  "providers",
		Usage: "list the providers compiled into this binary",
		Description: "A binary built without provider_<name> tags has every provider; one built with\n" +
			"-tags provider_<name> (e.g. bin/machinist-local) has only the providers it names.",
		Flags: []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error {
			type provider struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			}
			list := []provider{}
			for _, r := range registry.All() {
				list = append(list, provider{r.Name, r.Description})
			}
			if isJSON(c) {
				return writeJSON(c, list)
			}
			if len(list) == 0 {
				_, err := fmt.Fprintln(c.App.Writer, "no providers compiled in: rebuild with -tags provider_<name> or without tags")
				return err
			}
			w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROVIDER\tDESCRIPTION")
			for _, p := range list {
				fmt.Fprintf(w, "%s\t%s\n", p.Name, p.Description)
			}
			return w.Flush()
		},
	}
}
