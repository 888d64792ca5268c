from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0003_mcp_server'),
    ]

    operations = [
        migrations.AddField(
            model_name='mcpserver',
            name='resources',
            field=models.JSONField(blank=True, default=list, help_text='The resources it listed last: [{uri, name, description, mime_type}].'),
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='prompts',
            field=models.JSONField(blank=True, default=list, help_text='The prompts it listed last: [{name, description, arguments}].'),
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='writable_paths',
            field=models.JSONField(blank=True, default=list, help_text='stdio: host folders the program may write (a JSON list); its own data folder always is.'),
        ),
    ]
