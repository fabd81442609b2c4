"""What a reading is judged against: thresholds, the physical peaks of links, the GPU model table and
the verdict classes (the action an operator takes). Pure data and functions: nothing here reads the
node, so checks, benchmarks and fleet judges share one home for each rule.
"""
