"""The suite runner and the ablation wrapper behind validation/tools/pim/..."""
