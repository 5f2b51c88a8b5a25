"""The analyse stage: runs become figures and verdicts. Statistics live in stats, and in sequential the rule that
stops runs made in rounds; every table, report and plot reads what these modules return."""
