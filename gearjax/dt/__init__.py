"""Decision transformers trained on gearjax tables: data, model, training, evaluation."""
