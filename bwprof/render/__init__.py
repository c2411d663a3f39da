"""The rendering layer: the terminal tables (`terminal`, `accept`, `planview`, `progress`,
`consoles`), the plots (`plots`, `rooflineplot`, `timeline`, `figstyle`), report.html
(`html`, `templates/`) and the files written beside the rows (`outputs`). It draws what the
analysis layer derived; it never measures."""
