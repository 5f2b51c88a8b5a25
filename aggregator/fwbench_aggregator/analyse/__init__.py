"""The analyse stage: runs become figures and verdicts. Statistics live in stats alone; every table, report and
plot reads what these modules return."""
