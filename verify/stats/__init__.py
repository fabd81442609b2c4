"""Statistics over many runs or hosts (median, outliers, version uniformity), shared by the fleet
report and the history below both."""
